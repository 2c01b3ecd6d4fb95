// Live lists: the experiment list (last run's status badge, last/best eval accuracy) and an
// experiment's run list (status, duration, accuracies; a new run appears as a row) follow the
// list feed /ws/runs/ (webapp/runs/list_consumer.py) without a reload. The feed carries
// {"type": "run", "run": RunState} for the signed-in user's runs (staff: every run).
// Hooks in the templates: <tbody data-live-runs="experiments"> with rows
// tr[data-experiment-id][data-last-run-id][data-last-run-number], or
// <tbody data-live-runs="runs" data-experiment-id> with rows tr[data-run-id]; cells
// td[data-field=last-run|status|duration|last_eval_accuracy|best_eval_accuracy].
// body[data-live-lists] says "open" while the socket is up, "closed" while it reconnects.
(function () {
  "use strict";

  var ACTIVE = { queued: 1, starting: 1, running: 1 };

  function acc(value) { return value === null || value === undefined ? "" : Number(value).toFixed(3); }

  function unix(value) {
    if (value === null || value === undefined || value === "") return null;
    if (typeof value === "number") return value;
    var t = Date.parse(value);
    return isNaN(t) ? null : t / 1000;
  }

  function span(seconds) {
    seconds = Math.max(0, Math.round(seconds));
    var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    if (h) return h + "h " + (m < 10 ? "0" : "") + m + "m";
    if (m) return m + "m " + (s < 10 ? "0" : "") + s + "s";
    return s + "s";
  }

  function duration(run) {
    var start = unix(run.started_at), end = unix(run.finished_at);
    if (start === null) return "";
    if (end !== null) return span(end - start);
    return ACTIVE[run.status] ? "running " + span(Date.now() / 1000 - start) : "";
  }

  function setCell(row, field, text) {
    var cell = row.querySelector('[data-field="' + field + '"]');
    if (cell && cell.textContent !== text) cell.textContent = text;
    return cell;
  }

  function badge(el, status, text) {
    el.className = "status " + status;
    el.textContent = text;
  }

  // ------------------------------------------------------------------ experiment list
  function onExperimentList(body, run) {
    var row = body.querySelector('tr[data-experiment-id="' + run.experiment_id + '"]');
    if (!row) return; // not on this page (filtered out or another page)
    var shownId = row.dataset.lastRunId, shownNumber = +(row.dataset.lastRunNumber || 0);
    if (String(run.id) !== shownId && run.number < shownNumber) return; // an older run
    row.dataset.lastRunId = String(run.id);
    row.dataset.lastRunNumber = String(run.number);
    row.dataset.status = run.status;
    var cell = row.querySelector('[data-field="last-run"]');
    var link = cell.querySelector("a.status");
    if (!link) {
      cell.textContent = "";
      link = document.createElement("a");
      cell.appendChild(link);
    }
    link.href = run.url || "/runs/" + run.id + "/";
    badge(link, run.status, "#" + run.number + " " + run.status);
    setCell(row, "last_eval_accuracy", acc(run.last_eval_accuracy));
    setCell(row, "best_eval_accuracy", acc(run.best_eval_accuracy));
  }

  // ------------------------------------------------------------------ an experiment's runs
  function newRunRow(run) {
    var tr = document.createElement("tr");
    tr.dataset.runId = String(run.id);
    tr.dataset.runNumber = String(run.number);
    var cells = ["pick", "run", "status", "created", "duration", "last_eval_accuracy", "best_eval_accuracy"];
    cells.forEach(function (field) {
      var td = document.createElement("td");
      td.dataset.field = field;
      tr.appendChild(td);
    });
    var box = document.createElement("input");
    box.type = "checkbox";
    box.className = "compare-pick";
    box.value = String(run.id);
    box.setAttribute("aria-label", "compare run " + run.number);
    tr.cells[0].appendChild(box);
    var a = document.createElement("a");
    a.href = run.url || "/runs/" + run.id + "/";
    a.textContent = "#" + run.number;
    tr.cells[1].appendChild(a);
    var s = document.createElement("span");
    tr.cells[2].appendChild(s);
    var created = unix(run.created);
    if (created !== null) {
      var d = new Date(created * 1000);
      var pad = function (n) { return (n < 10 ? "0" : "") + n; };
      tr.cells[3].textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) +
        " " + pad(d.getHours()) + ":" + pad(d.getMinutes());
    }
    return tr;
  }

  function onRunList(body, run) {
    if (String(run.experiment_id) !== body.dataset.experimentId) return;
    var row = body.querySelector('tr[data-run-id="' + run.id + '"]');
    if (!row) {
      row = newRunRow(run);
      var before = null; // rows are newest first
      body.querySelectorAll("tr[data-run-id]").forEach(function (r) {
        if (!before && +r.dataset.runNumber < run.number) before = r;
      });
      body.insertBefore(row, before);
      var form = body.closest("form");
      if (form) form.hidden = false;
      var empty = document.getElementById("runs-empty");
      if (empty) empty.hidden = true;
    }
    row.dataset.status = run.status;
    badge(row.querySelector('[data-field="status"] span') || row.querySelector('[data-field="status"]'),
          run.status, run.status);
    setCell(row, "duration", duration(run));
    setCell(row, "last_eval_accuracy", acc(run.last_eval_accuracy));
    setCell(row, "best_eval_accuracy", acc(run.best_eval_accuracy));
  }

  function apply(run) {
    document.querySelectorAll("[data-live-runs]").forEach(function (body) {
      if (body.dataset.liveRuns === "experiments") onExperimentList(body, run);
      else if (body.dataset.liveRuns === "runs") onRunList(body, run);
    });
  }

  // ------------------------------------------------------------------ the socket
  function connect(delay) {
    var url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/runs/";
    var socket = new WebSocket(url);
    socket.onopen = function () { delay = 1000; document.body.dataset.liveLists = "open"; };
    socket.onmessage = function (event) {
      var message;
      try { message = JSON.parse(event.data); } catch (err) { return; }
      if (message && message.type === "run" && message.run) apply(message.run);
    };
    socket.onclose = function (event) {
      document.body.dataset.liveLists = "closed";
      if (event.code === 4403) return; // signed out: nothing to follow
      setTimeout(function () { connect(Math.min(delay * 2, 15000)); }, delay);
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!document.querySelector("[data-live-runs]") || !window.WebSocket) return;
    connect(1000);
  });
})();
