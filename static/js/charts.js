// Metric charts shared by the run page and the compare page (window.RFTCharts), vanilla JS over
// the vendored Plotly (static/vendor/plotly.min.js; SVG `scatter` traces only, never WebGL).
//
// - groupOf(name) / groupNames(names): Trinity's metric names sorted into the page's groups
//   (reward & accuracy, losses, KL, entropy, grad norm, clip fraction, response length,
//   throughput & timings, other).
// - ema(values, weight) and EmaState: TensorBoard's debiased EMA (s = s*w + (1-w)*x;
//   s / (1 - w^n)); null (NaN/inf) points stay null and do not move the average.
// - Timeline: a run's start and ordered stages; places a point on the x axis for a mode:
//   "step" (a later stage's steps after the earlier stage's last step), "wall" (date axis),
//   "relative" (seconds since the run's start). Its boundaries() mark the stage changes.
// - Board: one chart per metric, in group sections, each series drawn twice (raw faintly, the
//   smoothed curve on top); setData / extend (live points, Plotly.extendTraces) /
//   setSmoothing / setXMode / setSelected.
// - Picker: checkboxes per group (with all/none) choosing the metrics the Board draws.
//
// A series: {id, label, color, timeline, step: [], wall_time: [], value: [], stage: []}.
(function () {
  "use strict";

  var GROUPS = [
    { key: "reward", title: "Reward & accuracy" },
    { key: "loss", title: "Losses" },
    { key: "kl", title: "KL" },
    { key: "entropy", title: "Entropy" },
    { key: "grad_norm", title: "Grad norm" },
    { key: "clipfrac", title: "Clip fraction" },
    { key: "response_length", title: "Response length" },
    { key: "perf", title: "Throughput & timings" },
    { key: "system", title: "System (CPU, memory, GPU)" },
    { key: "other", title: "Other" },
  ];
  var GROUP_TITLES = {};
  GROUPS.forEach(function (g) { GROUP_TITLES[g.key] = g.title; });

  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                 "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

  function groupOf(name) {
    var n = String(name).toLowerCase();
    if (/^system\//.test(n)) return "system"; // system/<role>/...: rft_core.monitor.system
    if (/^eval\/.+\/accuracy\//.test(n) || /^rollout\/accuracy\//.test(n) ||
        /^critic\/(rewards|score)/.test(n) || (/^rollout\//.test(n) && n.indexOf("reward") >= 0) ||
        /(^|\/)(reward|accuracy)/.test(n)) return "reward";
    if (n.indexOf("clipfrac") >= 0 || n.indexOf("clip_frac") >= 0) return "clipfrac";
    if (/^(perf|time|timing_s|timing)\//.test(n) || n.indexOf("throughput") >= 0) return "perf";
    if (n.indexOf("response_length") >= 0 || /^prompt_length\//.test(n)) return "response_length";
    if (/loss/.test(n)) return "loss"; // actor/pg_loss, actor/sft_loss, actor/kl_loss, ...
    if (n.indexOf("kl") >= 0) return "kl"; // actor/ppo_kl, kl coefficients
    if (n.indexOf("entropy") >= 0) return "entropy";
    if (n.indexOf("grad_norm") >= 0 || n.indexOf("gradnorm") >= 0) return "grad_norm";
    return "other";
  }

  function groupNames(names) {
    var byGroup = {};
    names.forEach(function (name) {
      var g = groupOf(name);
      (byGroup[g] = byGroup[g] || []).push(name);
    });
    return GROUPS.filter(function (g) { return byGroup[g.key]; }).map(function (g) {
      return { key: g.key, title: g.title, names: byGroup[g.key].slice().sort() };
    });
  }

  // ------------------------------------------------------------------ smoothing
  function EmaState(weight) { this.weight = weight; this.s = 0; this.n = 0; }
  EmaState.prototype.push = function (x) {
    if (x === null || x === undefined || !isFinite(x)) return null;
    var w = this.weight;
    if (w <= 0) return x;
    this.n += 1;
    this.s = this.s * w + (1 - w) * x;
    // 12 significant digits: a constant series stays constant (the debiasing division leaves
    // ~1e-17 of noise, which Plotly's autorange would blow up into spikes with no y ticks)
    return Number((this.s / (1 - Math.pow(w, this.n))).toPrecision(12));
  };

  function ema(values, weight) {
    var state = new EmaState(weight);
    return values.map(function (x) { return state.push(x); });
  }

  // ------------------------------------------------------------------ time line
  function Timeline(opts) {
    opts = opts || {};
    this.start = opts.start || null; // unix s
    this.stages = (opts.stages || []).map(function (s) {
      return { name: s.name, start: s.start, end: s.end };
    });
    this.maxStep = {}; // stage name -> last step seen
  }
  Timeline.prototype.stageIndex = function (stage) {
    for (var i = 0; i < this.stages.length; i++) if (this.stages[i].name === stage) return i;
    return -1;
  };
  // Record a point; true when the step offsets of later stages (or the stage list) changed.
  Timeline.prototype.observe = function (stage, step, wallTime) {
    var changed = false;
    stage = stage || "";
    if (stage && this.stageIndex(stage) < 0) {
      this.stages.push({ name: stage, start: wallTime, end: null });
      changed = this.stages.length > 1;
    }
    if (this.start === null && wallTime) this.start = wallTime;
    if (step !== null && step !== undefined && (this.maxStep[stage] === undefined || step > this.maxStep[stage])) {
      var i = this.stageIndex(stage);
      if (i >= 0 && i < this.stages.length - 1 && this.maxStep[stage] !== undefined) changed = true;
      this.maxStep[stage] = step;
    }
    return changed;
  };
  Timeline.prototype.offset = function (stage) {
    var i = this.stageIndex(stage || "");
    var off = 0;
    for (var j = 0; j < i; j++) off += this.maxStep[this.stages[j].name] || 0;
    return off;
  };
  Timeline.prototype.x = function (mode, step, wallTime, stage) {
    if (mode === "wall") return wallTime * 1000;
    if (mode === "relative") return this.start === null ? 0 : wallTime - this.start;
    if (step === null || step === undefined) return null;
    return step + this.offset(stage);
  };
  // Where each stage after the first begins on the x axis: [{x, name}].
  Timeline.prototype.boundaries = function (mode) {
    var out = [];
    for (var i = 1; i < this.stages.length; i++) {
      var s = this.stages[i];
      var x;
      if (mode === "step") x = this.offset(s.name);
      else if (s.start === null || s.start === undefined) continue;
      else x = mode === "wall" ? s.start * 1000 : s.start - (this.start || s.start);
      out.push({ x: x, name: s.name });
    }
    return out;
  };

  // ------------------------------------------------------------------ board
  var AXIS_TITLES = { step: "step", wall: "wall time", relative: "time since start (s)" };

  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function Board(container, opts) {
    opts = opts || {};
    this.container = container;
    this.xMode = opts.xMode || "step";
    this.smoothing = opts.smoothing === undefined ? 0.6 : opts.smoothing;
    this.selected = opts.selected || null; // Set of names, or null: every metric
    this.height = opts.height || 260;
    this.metrics = {}; // name -> [series]
    this.charts = {}; // name -> {div, ema: {seriesId: EmaState}}
    this.sections = {};
  }

  // data: {metricName: [series, ...]}; replaces everything.
  Board.prototype.setData = function (data) {
    var self = this;
    this.metrics = {};
    Object.keys(data).forEach(function (name) {
      self.metrics[name] = data[name].map(function (s, i) { return self._normSeries(s, i); });
      self.metrics[name].forEach(function (s) { self._observeAll(s); });
    });
    this.render();
  };

  Board.prototype._normSeries = function (s, i) {
    return {
      id: s.id === undefined ? String(i) : String(s.id),
      label: s.label || s.id || "",
      color: s.color || PALETTE[i % PALETTE.length],
      timeline: s.timeline || (this._defaultTimeline = this._defaultTimeline || new Timeline()),
      step: (s.step || []).slice(),
      wall_time: (s.wall_time || []).slice(),
      value: (s.value || []).slice(),
      stage: (s.stage || []).slice(),
    };
  };

  Board.prototype._observeAll = function (s) {
    var changed = false;
    for (var i = 0; i < s.value.length; i++) {
      changed = s.timeline.observe(s.stage[i], s.step[i], s.wall_time[i]) || changed;
    }
    return changed;
  };

  Board.prototype.names = function () { return Object.keys(this.metrics).sort(); };

  Board.prototype.isShown = function (name) {
    return !this.selected || this.selected.has(name);
  };

  Board.prototype._section = function (groupKey) {
    if (this.sections[groupKey]) return this.sections[groupKey];
    var sec = document.createElement("section");
    sec.className = "chart-group";
    sec.dataset.group = groupKey;
    sec.innerHTML = "<h3>" + escapeHtml(GROUP_TITLES[groupKey]) + '</h3><div class="chart-grid"></div>';
    // keep the sections in GROUPS order
    var order = GROUPS.map(function (g) { return g.key; });
    var before = null;
    var kids = this.container.querySelectorAll(":scope > section.chart-group");
    for (var i = 0; i < kids.length; i++) {
      if (order.indexOf(kids[i].dataset.group) > order.indexOf(groupKey)) { before = kids[i]; break; }
    }
    this.container.insertBefore(sec, before);
    this.sections[groupKey] = sec;
    return sec;
  };

  Board.prototype._traces = function (name) {
    var self = this;
    var traces = [];
    var charts = this.charts[name];
    charts.ema = {};
    this.metrics[name].forEach(function (s) {
      var xs = [];
      for (var i = 0; i < s.value.length; i++) {
        xs.push(s.timeline.x(self.xMode, s.step[i], s.wall_time[i], s.stage[i]));
      }
      var state = new EmaState(self.smoothing);
      var smooth = s.value.map(function (v) { return state.push(v); });
      charts.ema[s.id] = state;
      var custom = s.value.map(function (v, i) { return [s.step[i], v, s.stage[i] || ""]; });
      var hover = (s.label ? escapeHtml(s.label) + "<br>" : "") +
        "step %{customdata[0]} %{customdata[2]}<br>smoothed %{y:.4g}<br>raw %{customdata[1]:.4g}<extra></extra>";
      traces.push({
        type: "scatter", mode: "lines", name: (s.label || name) + " (raw)", x: xs, y: s.value.slice(),
        line: { color: s.color, width: 1 }, opacity: 0.25, hoverinfo: "skip", showlegend: false,
        meta: { series: s.id, kind: "raw" }, connectgaps: false,
      });
      traces.push({
        type: "scatter", mode: s.value.length === 1 ? "lines+markers" : "lines",
        name: s.label || name, x: xs.slice(), y: smooth, customdata: custom,
        line: { color: s.color, width: 2 }, hovertemplate: hover,
        meta: { series: s.id, kind: "smoothed" }, connectgaps: true,
      });
    });
    return traces;
  };

  Board.prototype._layout = function (name) {
    var series = this.metrics[name];
    var timeline = series.length ? series[0].timeline : null;
    var shapes = [], annotations = [];
    if (timeline) {
      timeline.boundaries(this.xMode).forEach(function (b) {
        shapes.push({ type: "line", xref: "x", yref: "paper", x0: b.x, x1: b.x, y0: 0, y1: 1,
                      line: { color: "#98a2b3", width: 1, dash: "dash" } });
        annotations.push({ xref: "x", yref: "paper", x: b.x, y: 1, text: escapeHtml(b.name),
                           showarrow: false, xanchor: "left", yanchor: "top", xshift: 3,
                           bgcolor: "rgba(255,255,255,0.8)", font: { size: 10, color: "#5b6472" } });
      });
    }
    return {
      title: { text: escapeHtml(name), font: { size: 13 }, x: 0.02 },
      height: this.height, margin: { l: 50, r: 15, t: 35, b: 35 },
      xaxis: { title: { text: AXIS_TITLES[this.xMode], font: { size: 11 } },
               type: this.xMode === "wall" ? "date" : "linear", zeroline: false },
      yaxis: { zeroline: false, automargin: true },
      showlegend: series.length > 1, legend: { orientation: "h", y: -0.25 },
      hovermode: "closest", shapes: shapes, annotations: annotations,
      paper_bgcolor: "#fff", plot_bgcolor: "#fff",
    };
  };

  Board.prototype._draw = function (name) {
    var chart = this.charts[name];
    if (!chart) {
      var sec = this._section(groupOf(name));
      var div = document.createElement("div");
      div.className = "chart";
      div.dataset.metric = name;
      sec.querySelector(".chart-grid").appendChild(div);
      chart = this.charts[name] = { div: div, ema: {} };
    }
    chart.div.hidden = false;
    Plotly.react(chart.div, this._traces(name), this._layout(name),
                 { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["toImage"] });
  };

  Board.prototype.render = function () {
    var self = this;
    this.names().forEach(function (name) {
      if (self.isShown(name)) self._draw(name);
      else if (self.charts[name]) self.charts[name].div.hidden = true;
    });
    Object.keys(this.sections).forEach(function (key) {
      var sec = self.sections[key];
      sec.hidden = !sec.querySelector(".chart:not([hidden])");
    });
  };

  // Append points to one series of one metric (created when new). points: {step, wall_time,
  // value, stage} arrays. Returns true when a new metric appeared (a picker may want to know).
  Board.prototype.extend = function (name, seriesId, points, seriesOpts) {
    var self = this;
    var isNew = !this.metrics[name];
    var list = this.metrics[name] = this.metrics[name] || [];
    var s = null;
    for (var i = 0; i < list.length; i++) if (list[i].id === String(seriesId)) s = list[i];
    var newSeries = !s;
    if (!s) {
      s = this._normSeries(Object.assign({ id: String(seriesId) }, seriesOpts || {}), list.length);
      list.push(s);
    }
    var from = s.value.length;
    var shift = false;
    for (var j = 0; j < points.value.length; j++) {
      var st = points.stage ? points.stage[j] : "";
      var step = points.step[j], wt = points.wall_time[j];
      shift = s.timeline.observe(st, step, wt) || shift;
      s.step.push(step); s.wall_time.push(wt); s.value.push(points.value[j]); s.stage.push(st || "");
    }
    var chart = this.charts[name];
    if (!this.isShown(name)) return isNew;
    if (!chart || newSeries || shift || !chart.div.data) {
      // a stage boundary moved the later stages' steps: redraw every chart on that time line
      if (shift) this.render(); else { this._draw(name); this._fixSections(); }
      return isNew;
    }
    var idx = -1;
    chart.div.data.forEach(function (t, k) { if (t.meta && t.meta.series === s.id && t.meta.kind === "raw") idx = k; });
    if (idx < 0) { this._draw(name); return isNew; }
    var xs = [], raw = [], smooth = [], custom = [];
    var state = chart.ema[s.id];
    for (var k = from; k < s.value.length; k++) {
      xs.push(s.timeline.x(this.xMode, s.step[k], s.wall_time[k], s.stage[k]));
      raw.push(s.value[k]);
      smooth.push(state.push(s.value[k]));
      custom.push([s.step[k], s.value[k], s.stage[k]]);
    }
    Plotly.extendTraces(chart.div, { x: [xs], y: [raw] }, [idx]);
    Plotly.extendTraces(chart.div, { x: [xs.slice()], y: [smooth], customdata: [custom] }, [idx + 1]);
    if (s.value.length > 1 && chart.div.data[idx + 1].mode !== "lines") {
      Plotly.restyle(chart.div, { mode: "lines" }, [idx + 1]);
    }
    void self;
    return isNew;
  };

  Board.prototype._fixSections = function () {
    var self = this;
    Object.keys(this.sections).forEach(function (key) {
      self.sections[key].hidden = !self.sections[key].querySelector(".chart:not([hidden])");
    });
  };

  Board.prototype.setSmoothing = function (w) { this.smoothing = Math.max(0, Math.min(0.999, +w)); this.render(); };
  Board.prototype.setXMode = function (mode) {
    if (!AXIS_TITLES[mode]) throw new Error("unknown x-axis mode " + mode);
    this.xMode = mode; this.render();
  };
  Board.prototype.setSelected = function (set) { this.selected = set; this.render(); };

  // ------------------------------------------------------------------ picker
  // Checkboxes per group. opts: {selected: Set|null (null: all), onChange(Set)}
  function Picker(container, opts) {
    opts = opts || {};
    this.container = container;
    this.onChange = opts.onChange || function () {};
    this.defaultOn = opts.defaultOn || function () { return true; };
    this.selected = new Set();
    this.known = new Set();
    this.container.classList.add("metric-picker");
    var self = this;
    this.container.addEventListener("change", function (e) {
      var box = e.target;
      if (!box.matches("input[type=checkbox][data-metric]")) return;
      if (box.checked) self.selected.add(box.dataset.metric); else self.selected.delete(box.dataset.metric);
      self.onChange(self.selected);
    });
    this.container.addEventListener("click", function (e) {
      var btn = e.target.closest("button[data-all]");
      if (!btn) return;
      e.preventDefault();
      var on = btn.dataset.all === "1";
      btn.closest("fieldset").querySelectorAll("input[data-metric]").forEach(function (box) {
        box.checked = on;
        if (on) self.selected.add(box.dataset.metric); else self.selected.delete(box.dataset.metric);
      });
      self.onChange(self.selected);
    });
  }

  Picker.prototype.addNames = function (names) {
    var self = this;
    var fresh = names.filter(function (n) { return !self.known.has(n); });
    if (!fresh.length) return false;
    fresh.forEach(function (n) {
      self.known.add(n);
      if (self.defaultOn(n)) self.selected.add(n);
    });
    this.render();
    return true;
  };

  Picker.prototype.render = function () {
    var self = this;
    var html = groupNames(Array.from(this.known)).map(function (g) {
      return '<fieldset data-group="' + g.key + '"><legend>' + escapeHtml(g.title) +
        ' <button type="button" data-all="1">all</button><button type="button" data-all="0">none</button></legend>' +
        g.names.map(function (n) {
          return '<label><input type="checkbox" data-metric="' + escapeHtml(n) + '"' +
            (self.selected.has(n) ? " checked" : "") + "> " + escapeHtml(n) + "</label>";
        }).join("") + "</fieldset>";
    }).join("");
    this.container.innerHTML = html;
  };

  window.RFTCharts = {
    GROUPS: GROUPS, PALETTE: PALETTE, groupOf: groupOf, groupNames: groupNames,
    ema: ema, EmaState: EmaState, Timeline: Timeline, Board: Board, Picker: Picker,
    escapeHtml: escapeHtml,
  };
})();
