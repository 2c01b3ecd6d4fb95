// The compare page (/runs/compare/?ids=1,2,...): the chosen runs' curves overlaid per metric
// (one chart per metric, in charts.js's groups, one trace per run; a run keeps its colour on
// every chart and in the legend "experiment #number"), with the run page's smoothing slider,
// x-axis choice and metric picker (static/js/charts.js). Series come from
// /runs/compare/data.json?ids=...&names=...: the reward/accuracy group first; a metric ticked
// in the picker is fetched when first shown.
(function () {
  "use strict";

  var MAX_NAMES = 40; // the endpoint's bound (webapp/runs/compare.py MAX_NAMES)

  function init(root) {
    var C = window.RFTCharts;
    var ids = root.dataset.ids;
    var url = root.dataset.url;
    var empty = document.getElementById("charts-empty");
    var note = document.getElementById("charts-note");
    var slider = document.getElementById("smoothing");
    var sliderOut = document.getElementById("smoothing-value");
    var xMode = document.getElementById("x-mode");
    xMode.value = "step"; // runs side by side over the whole run; "step of one stage" a click away
    var board = new C.Board(document.getElementById("charts"), {
      smoothing: +slider.value, xMode: xMode.value, selected: new Set(),
    });
    var refreshStages = C.bindStageControls(board);
    var runs = []; // [{id, label, color, url}], the page's order
    var loaded = {}; // metric name -> {runId: arrays}
    var picker = null;

    function fail(message) {
      empty.hidden = false;
      empty.textContent = message;
      empty.classList.add("errors");
    }

    function fetchNames(names) {
      var q = "?ids=" + encodeURIComponent(ids);
      if (names) q += "&names=" + names.map(encodeURIComponent).join(",");
      return fetch(url + q, { headers: { Accept: "application/json" }, credentials: "same-origin" })
        .then(function (r) {
          return r.json().then(function (body) {
            if (!r.ok) throw new Error(body.detail || ("HTTP " + r.status));
            return body;
          }, function () { throw new Error("HTTP " + r.status); });
        });
    }

    function absorb(body) {
      body.selected.forEach(function (name) { loaded[name] = loaded[name] || {}; });
      body.runs.forEach(function (run) {
        Object.keys(run.metrics).forEach(function (name) { loaded[name][run.id] = run.metrics[name]; });
      });
      var thinned = body.runs.some(function (run) {
        return Object.keys(run.metrics).some(function (n) { return run.metrics[n].downsampled; });
      });
      if (thinned) {
        note.hidden = false;
        note.textContent = "Long series are thinned to " + body.max_points + " evenly spread points per run.";
      }
    }

    function redraw() {
      // one time line per run (its own stages and start), rebuilt over every loaded metric
      // (its stages in the order they began, whatever order their metrics were loaded in)
      var timelines = {};
      runs.forEach(function (run) {
        var start = null, began = {};
        Object.keys(loaded).forEach(function (name) {
          var a = loaded[name][run.id];
          if (a) a.wall_time.forEach(function (t, i) {
            if (t === null) return;
            if (start === null || t < start) start = t;
            var stage = a.stage[i] || "";
            if (stage && (began[stage] === undefined || t < began[stage])) began[stage] = t;
          });
        });
        var stages = Object.keys(began).sort(function (x, y) { return began[x] - began[y]; })
          .map(function (name) { return { name: name, start: began[name], end: null }; });
        timelines[run.id] = new C.Timeline({ start: start, stages: stages });
      });
      var data = {};
      Object.keys(loaded).forEach(function (name) {
        var series = [];
        runs.forEach(function (run) {
          var a = loaded[name][run.id];
          if (!a) return;
          series.push({ id: run.id, label: run.label, color: run.color, timeline: timelines[run.id],
                        step: a.step, wall_time: a.wall_time, value: a.value, stage: a.stage });
        });
        if (series.length) data[name] = series;
      });
      board.selected = picker ? new Set(picker.selected) : new Set(Object.keys(data));
      board.setData(data);
      refreshStages();
      var shown = Object.keys(data).filter(function (n) { return board.isShown(n); });
      empty.hidden = shown.length > 0;
      if (!shown.length) empty.textContent = "None of these runs reported the metrics chosen.";
    }

    function onPick(selected) {
      var missing = Array.from(selected).filter(function (n) { return !loaded[n]; });
      if (!missing.length) { board.setSelected(new Set(selected)); redraw(); return; }
      var batches = [];
      for (var i = 0; i < missing.length; i += MAX_NAMES) batches.push(missing.slice(i, i + MAX_NAMES));
      Promise.all(batches.map(fetchNames)).then(function (bodies) {
        bodies.forEach(absorb);
        redraw();
      }).catch(function (err) { fail("Could not load metrics: " + err.message); });
    }

    fetchNames(null).then(function (body) {
      runs = body.runs.map(function (run, i) {
        return { id: run.id, label: run.label, url: run.url, color: C.PALETTE[i % C.PALETTE.length] };
      });
      runs.forEach(function (run) {
        var li = document.querySelector('#compare-legend li[data-run-id="' + run.id + '"]');
        if (li) li.style.borderLeftColor = run.color;
      });
      var first = new Set(body.selected);
      picker = new C.Picker(document.getElementById("metric-picker"), {
        defaultOn: function (n) { return first.has(n); }, onChange: onPick,
      });
      absorb(body);
      picker.addNames(body.names);
      redraw();
      if (!body.names.length) empty.textContent = "These runs have no metric points yet.";
    }).catch(function (err) { fail("Could not load metrics: " + err.message); });

    slider.addEventListener("input", function () {
      sliderOut.textContent = (+slider.value).toFixed(2);
      board.setSmoothing(+slider.value);
    });
    xMode.addEventListener("change", function () { board.setXMode(xMode.value); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.getElementById("compare-charts");
    if (root && window.RFTCharts && window.Plotly) init(root);
  });
})();
