// The live run page /runs/<id>/ (vanilla JS over RFTCharts, static/js/charts.js).
//
// Live protocol (docs: the issue-10 brief; server: webapp/runs/live.py, webapp/events):
// subscribe to /ws/runs/<id>/ first and buffer its `events` batches, load live.json (the
// snapshot, up to `seq`), then apply each batch whose first_seq == last + 1, ignore those with
// last_seq <= last, and on a gap or a reconnect refetch live.json?after=last (again while
// `more`). `run` and `checkpoint` messages carry full states. While the socket is closed the
// page says so and polls live.json?after=last every 3 s; it reconnects with backoff. A `run`
// message that would freeze the page (a final status, a requested cancel: never undone once
// shown) is only believed when the run's own live.json says so too.
(function () {
  "use strict";

  var root = document.getElementById("run-page");
  if (!root) return;
  var C = window.RFTCharts;
  var esc = C.escapeHtml;
  var POLL_MS = 3000;
  var MAX_LOG_LINES = 20000;
  var SAMPLE_STEPS = 5; // the snapshot's samples are of the last 5 steps too
  var SAMPLES_SHOWN = 4; // cards per step; the rollout explorer has them all

  var S = {
    last: null, // last applied seq; null until the snapshot is in
    buffer: [],
    run: null,
    clockSkew: 0, // server now - local now (s)
    ws: null,
    wsOpen: false,
    backoff: 1000,
    pollTimer: null,
    fetching: null,
    fetchAgain: false,
    confirmations: 0, // final states from the socket checked against live.json (for tests)
    logs: [],
    actors: new Set(),
    levels: new Set(),
    checkpoints: {}, // id -> CheckpointState
    files: {}, // checkpoint id -> files.json body
    samples: [],
  };
  window.RFTRunPage = S; // for tests and debugging

  function now() { return Date.now() / 1000 + S.clockSkew; }
  function $(id) { return document.getElementById(id); }

  function csrfToken() {
    var input = root.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  var fmtDuration = window.RFTProgress.fmtDuration; // "1h 2m", "3m 4s", "5s"
  function fmtTime(ts) {
    if (!ts) return "—";
    var d = new Date(ts * 1000);
    return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }
  function fmtSize(n) {
    if (n === null || n === undefined) return "—";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  function toUnix(v) {
    if (v === null || v === undefined || v === "") return null;
    if (typeof v === "number") return v;
    var t = Date.parse(v);
    return isNaN(t) ? null : t / 1000;
  }

  // ------------------------------------------------------------------ run state
  var ACTIVE = { queued: 1, starting: 1, running: 1 };

  function applyRun(run) {
    if (!run) return;
    var prev = S.run;
    // states may arrive out of order (a push sent before the fetch answered): a requested
    // cancel and a final status never go back
    if (prev && prev.cancel_requested && !run.cancel_requested) run = Object.assign({}, run, { cancel_requested: true });
    if (prev && !ACTIVE[prev.status] && ACTIVE[run.status]) run = Object.assign({}, run, { status: prev.status, finished_at: prev.finished_at });
    S.run = run;
    // run_extras.js (the run-end notification) listens
    root.dispatchEvent(new CustomEvent("rft:run", { detail: { run: run, prev: prev || null } }));
    var badge = $("run-status");
    badge.className = "status status-" + run.status;
    badge.dataset.status = run.status;
    badge.textContent = run.status.charAt(0).toUpperCase() + run.status.slice(1);
    root.dataset.status = run.status;
    window.RFTProgress.render(run); // stage n of m, its step and bar, the run's bars, the phase
    var acc = run.last_eval_accuracy;
    $("run-accuracy").textContent = acc === null || acc === undefined ? "—"
      : "last " + acc.toFixed(3) + ", best " + (run.best_eval_accuracy === null ? "—" : run.best_eval_accuracy.toFixed(3));
    var err = $("run-error");
    var reason = err.querySelector(".exit-reason"), last = err.querySelector(".last-error");
    reason.textContent = run.exit_reason || "";
    reason.hidden = !run.exit_reason;
    last.innerHTML = run.last_error ? "Last error: <code>" + esc(run.last_error) + "</code>" : "";
    last.hidden = !run.last_error;
    err.hidden = !run.exit_reason && !run.last_error;
    err.classList.toggle("ok", run.status === "succeeded");
    err.classList.toggle("neutral", run.status === "cancelled"); // asked for: not an alarm
    // the facts table, drawn at page load, follows the run too
    function utc(t) { return t ? new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "—"; }
    $("fact-started").textContent = utc(run.started_at);
    $("fact-finished").textContent = utc(run.finished_at);
    if (run.job_dir !== undefined) $("fact-job-dir").textContent = run.job_dir || "—";
    if (run.submission_id !== undefined) $("fact-submission").textContent = run.submission_id || "—";
    // cancel: a button while active, "stopping…" once requested, then gone ("cancelled" badge)
    var active = !!ACTIVE[run.status];
    $("cancel-form").hidden = !active && run.status !== "cancelled";
    // a run started from a terminal is stopped there: no Ray job of the dashboard's to stop
    var outside = run.origin !== undefined && run.origin !== "dashboard";
    $("cancel-button").hidden = !active || run.cancel_requested || outside;
    var state = $("cancel-state");
    if (active && run.cancel_requested) { state.hidden = false; state.textContent = "Cancel requested; stopping…"; }
    else if (run.status === "cancelled") { state.hidden = false; state.textContent = "cancelled"; }
    else state.hidden = true;
    tick();
  }

  // A live message saying the run ended (or that a cancel was asked for) is confirmed through
  // the run's own live.json before the page shows it and freezes: a message that is not this
  // run's (a misrouted one, another deployment's run of the same number) must not end a page
  // that is still running. live.json's state is the one applied; if it is still active, the
  // page goes on following the run.
  function wouldFreeze(run) {
    if (!run) return false;
    if (!S.run) return !ACTIVE[run.status]; // the snapshot, still on its way, tells the truth
    return (ACTIVE[S.run.status] && !ACTIVE[run.status]) || (run.cancel_requested && !S.run.cancel_requested);
  }
  function onRunMessage(run) {
    if (!wouldFreeze(run)) { applyRun(run); return; }
    if (S.last === null) return; // loadSnapshot applies the run's state from live.json
    catchUp().then(function () { S.confirmations += 1; root.dataset.confirmations = String(S.confirmations); });
  }

  function tick() {
    var run = S.run;
    if (!run) return;
    var t = now();
    var start = toUnix(run.started_at) || toUnix(run.created);
    var end = toUnix(run.finished_at) || (ACTIVE[run.status] ? t : null);
    $("run-elapsed").textContent = start && end ? fmtDuration(end - start) : "—";
    var hb = toUnix(run.last_heartbeat);
    var hbEl = $("run-heartbeat");
    var ended = !ACTIVE[run.status];
    $("run-heartbeat-label").textContent = ended ? "Ended" : "Heartbeat";
    if (ended) { // a finished run's last heartbeat only grows old: its end is what counts
      var fin = toUnix(run.finished_at);
      hbEl.textContent = fin ? fmtTime(fin).slice(11) + " (" + fmtDuration(t - fin) + " ago)" : "—";
      hbEl.title = hb ? "last heartbeat " + fmtTime(hb) : "";
      hbEl.classList.remove("stale");
    } else if (hb) {
      var age = t - hb;
      hbEl.textContent = fmtDuration(age) + " ago";
      hbEl.title = fmtTime(hb);
      hbEl.classList.toggle("stale", !!(ACTIVE[run.status] && age > 60));
    } else hbEl.textContent = "—";
    window.RFTProgress.tick(run, t); // the server's ETA counting down, the phase's duration
  }
  setInterval(tick, 1000);

  // ------------------------------------------------------------------ charts
  var timeline = new C.Timeline();
  var board = new C.Board($("charts"), { xMode: "stage", smoothing: 0.6 }); // GRPO from its 0
  $("x-mode").value = "stage";
  var refreshStages = C.bindStageControls(board);
  var DEFAULT_OFF = { perf: 1, other: 1 };
  var picker = new C.Picker($("metric-picker"), {
    defaultOn: function (name) { return !DEFAULT_OFF[C.groupOf(name)]; },
    onChange: function (sel) { board.setSelected(new Set(sel)); },
  });
  board.selected = picker.selected;

  function loadMetrics(metrics, stages, runStart) {
    timeline = new C.Timeline({ start: runStart, stages: stages || [] });
    var data = {};
    Object.keys(metrics).forEach(function (name) {
      var m = metrics[name];
      data[name] = [{ id: "run", label: "", color: "#1f77b4", timeline: timeline,
                      step: m.step, wall_time: m.wall_time, value: m.value, stage: m.stage }];
    });
    picker.addNames(Object.keys(metrics));
    board.selected = picker.selected;
    board.setData(data);
    refreshStages();
    $("charts-empty").hidden = Object.keys(metrics).length > 0;
  }

  function applyMetricEvents(events) {
    var per = {};
    events.forEach(function (ev) {
      var data = ev.data || {};
      Object.keys(data).forEach(function (name) {
        var v = data[name];
        if (v !== null && typeof v !== "number") return;
        var p = per[name] = per[name] || { step: [], wall_time: [], value: [], stage: [] };
        p.step.push(ev.step); p.wall_time.push(ev.ts); p.value.push(v); p.stage.push(ev.stage || "");
      });
    });
    var names = Object.keys(per);
    if (!names.length) return;
    picker.addNames(names);
    board.selected = picker.selected;
    names.forEach(function (name) {
      board.extend(name, "run", per[name], { label: "", color: "#1f77b4", timeline: timeline });
    });
    refreshStages();
    $("charts-empty").hidden = true;
  }

  $("smoothing").addEventListener("input", function (e) {
    $("smoothing-value").textContent = (+e.target.value).toFixed(2);
    board.setSmoothing(+e.target.value);
  });
  $("x-mode").addEventListener("change", function (e) { board.setXMode(e.target.value); });

  // ------------------------------------------------------------------ logs
  var logView = $("log-view"), logList = $("log-lines");
  var following = true, unseen = 0;

  function logFilter() {
    return { actor: $("log-actor").value, level: $("log-level").value,
             q: $("log-search").value.trim().toLowerCase() };
  }
  function logMatches(line, f) {
    if (f.actor && line.actor !== f.actor) return false;
    if (f.level && (line.level || "").toUpperCase() !== f.level) return false;
    if (f.q && (line.text || "").toLowerCase().indexOf(f.q) < 0) return false;
    return true;
  }
  function logItem(line) {
    var li = document.createElement("li");
    var level = (line.level || "").toUpperCase();
    li.className = "log-line level-" + (level || "NONE").toLowerCase();
    li.dataset.actor = line.actor || "";
    li.dataset.level = level;
    li.innerHTML = '<time>' + esc(fmtTime(line.ts).slice(11, 19)) + '</time> <span class="lvl">' +
      esc(level || "-") + '</span> <span class="actor">' + esc(line.actor || "-") + "</span> " +
      '<span class="text">' + esc(line.text || "") + "</span>";
    return li;
  }
  function addOption(select, value) {
    var opt = document.createElement("option");
    opt.value = value; opt.textContent = value;
    var opts = Array.prototype.slice.call(select.options, 1);
    var before = opts.find(function (o) { return o.value > value; }) || null;
    select.insertBefore(opt, before);
  }
  function noteLogFacets(line) {
    if (line.actor && !S.actors.has(line.actor)) { S.actors.add(line.actor); addOption($("log-actor"), line.actor); }
    var lv = (line.level || "").toUpperCase();
    if (lv && !S.levels.has(lv)) { S.levels.add(lv); addOption($("log-level"), lv); }
  }
  function atBottom() { return logView.scrollTop + logView.clientHeight >= logView.scrollHeight - 8; }
  function renderLogs() {
    var f = logFilter();
    var frag = document.createDocumentFragment();
    var shown = 0;
    S.logs.forEach(function (line) { if (logMatches(line, f)) { frag.appendChild(logItem(line)); shown++; } });
    logList.innerHTML = "";
    logList.appendChild(frag);
    updateLogCount(shown);
    following = true; unseen = 0; $("log-resume").hidden = true;
    logView.scrollTop = logView.scrollHeight;
    updateDownload();
  }
  function updateLogCount(shown) {
    $("log-empty").hidden = S.logs.length > 0;
    $("log-count").textContent = shown + " of " + S.logs.length + " lines" +
      (S.logs.length >= MAX_LOG_LINES ? " (the page keeps the newest " + MAX_LOG_LINES + "; download for all)" : "");
  }
  function appendLogs(lines) {
    if (!lines.length) return;
    var f = logFilter();
    var stick = following && atBottom();
    var added = 0;
    lines.forEach(function (line) {
      S.logs.push(line);
      noteLogFacets(line);
      if (logMatches(line, f)) { logList.appendChild(logItem(line)); added++; }
    });
    if (S.logs.length > MAX_LOG_LINES) {
      S.logs.splice(0, S.logs.length - MAX_LOG_LINES);
      while (logList.children.length > MAX_LOG_LINES) logList.removeChild(logList.firstChild);
    }
    updateLogCount(logList.children.length);
    if (stick) logView.scrollTop = logView.scrollHeight;
    else if (added) { unseen += added; $("log-resume").hidden = false; $("log-resume").textContent = "Paused: " + unseen + " new line" + (unseen === 1 ? "" : "s") + " below — jump to the newest"; }
  }
  function updateDownload() {
    var f = logFilter();
    var qs = [];
    if (f.actor) qs.push("actor=" + encodeURIComponent(f.actor));
    if (f.level) qs.push("level=" + encodeURIComponent(f.level));
    $("log-download").href = root.dataset.logsUrl + (qs.length ? "?" + qs.join("&") : "");
  }
  logView.addEventListener("scroll", function () {
    following = atBottom();
    if (following) { unseen = 0; $("log-resume").hidden = true; }
  });
  $("log-resume").addEventListener("click", function () {
    following = true; unseen = 0; this.hidden = true; logView.scrollTop = logView.scrollHeight;
  });
  ["log-actor", "log-level"].forEach(function (id) { $(id).addEventListener("change", renderLogs); });
  var searchTimer = null;
  $("log-search").addEventListener("input", function () { clearTimeout(searchTimer); searchTimer = setTimeout(renderLogs, 150); });

  function logFromEvent(ev) {
    var d = ev.data || {};
    return { seq: ev.seq, actor: d.actor || ev.role || "", level: d.level || "", stage: ev.stage || "",
             ts: ev.ts, text: d.text || "" };
  }

  // ------------------------------------------------------------------ checkpoints
  var STATUS_TEXT = { absent: "not converted", converting: "converting", ready: "HF ready", failed: "failed",
                      pruned: "pruned (deleted by trainer.max_checkpoints_to_keep)" };

  function ckptKey(c) { return (c.stage || "") + "\u0000" + c.step; }
  function applyCheckpoint(c) {
    if (!c) return;
    // a provisional row from a checkpoint event gives way to the real one
    Object.keys(S.checkpoints).forEach(function (k) {
      var o = S.checkpoints[k];
      if (o.id === undefined && ckptKey(o) === ckptKey(c) && c.id !== undefined) delete S.checkpoints[k];
    });
    S.checkpoints[c.id !== undefined ? String(c.id) : "p:" + ckptKey(c)] = c;
    if (c.hf_status === "ready" && c.id !== undefined && !S.files[c.id]) loadFiles(c);
    renderCheckpoints();
    root.dispatchEvent(new CustomEvent("rft:checkpoint", { detail: c })); // run_extras.js: disk use
  }
  function renderCheckpoints() {
    var rows = Object.keys(S.checkpoints).map(function (k) { return S.checkpoints[k]; });
    // the stages as the run makes them (sft_warmup before rft), then by step
    var order = ((S.run && S.run.stages) || []).map(function (st) { return st.name; });
    function rank(c) { var i = order.indexOf(c.stage || ""); return i < 0 ? order.length : i; }
    rows.sort(function (a, b) { return rank(a) - rank(b) || (a.stage || "").localeCompare(b.stage || "") || a.step - b.step; });
    var body = $("checkpoint-rows");
    if (!rows.length) { body.innerHTML = '<tr class="empty"><td colspan="6" class="hint">No checkpoints yet.</td></tr>'; return; }
    // the checkpoints on disk first; the pruned ones folded into one row that opens them
    var kept = rows.filter(function (c) { return !c.pruned; });
    var pruned = rows.filter(function (c) { return c.pruned; });
    var fold = pruned.length ? '<tr class="pruned-summary" id="pruned-summary"><td colspan="6"><button type="button" class="pruned-toggle" aria-expanded="' +
      (S.showPruned ? "true" : "false") + '">' + (S.showPruned ? "▾ " : "▸ ") + pruned.length + " pruned checkpoint" + (pruned.length === 1 ? "" : "s") +
      '</button> <span class="hint">deleted by trainer.max_checkpoints_to_keep</span></td></tr>' : "";
    body.innerHTML = kept.map(checkpointRow).join("") + fold + (S.showPruned ? pruned.map(checkpointRow).join("") : "");
  }
  function checkpointRow(c) {
    var st = c.pruned ? "pruned" : c.hf_status || "absent";
    var hf = '<span class="hf hf-' + esc(st) + '">' + esc(STATUS_TEXT[st] || st) + "</span>";
    if (st === "converting") {
      var pct = Math.round((c.hf_progress || 0) * 100);
      hf += ' <progress max="100" value="' + pct + '"></progress> <span class="hint">' + pct + "%</span>";
    }
    if (st === "failed" && c.hf_error) hf += '<div class="error">' + esc(c.hf_error) + "</div>";
    if (st === "ready" && c.hf_path) {
      hf += '<div class="hf-path"><code>' + esc(c.hf_path) + '</code> <button type="button" class="copy" data-copy="' +
        esc(c.hf_path) + '">Copy path</button> <a class="download" href="/checkpoints/' + esc(c.id) + '/hf.tar" download>Download .tar</a></div>';
      var files = S.files[c.id];
      if (files && files.files) {
        hf += '<details class="hf-files"><summary>' + files.files.length + " files</summary><ul>" +
          files.files.map(function (f) { return "<li><code>" + esc(f.path) + "</code> <span class=\"hint\">" + fmtSize(f.size_bytes) + "</span></li>"; }).join("") +
          "</ul></details>";
      } else if (files && files.error) hf += '<div class="hint">' + esc(files.error) + "</div>";
    }
    var action = "";
    if (c.id !== undefined && c.convert_url && (st === "absent" || st === "failed")) {
      action = '<button type="button" class="convert" data-id="' + esc(c.id) + '" data-url="' + esc(c.convert_url) + '">Convert</button>';
    }
    if (c.id !== undefined && c.fork_url && !c.pruned) action += ' <a class="fork button" href="' + esc(c.fork_url) + '">Fork</a>';
    return '<tr data-checkpoint="' + esc(c.id === undefined ? "" : c.id) + '" data-stage="' + esc(c.stage || "") +
      '" data-step="' + esc(c.step) + '" data-hf-status="' + esc(st) + '"><td>' + esc(c.stage || "—") + "</td><td>" + esc(c.step) +
      "</td><td>" + esc(fmtTime(toUnix(c.created))) + "</td><td>" + esc(fmtSize(c.size_bytes)) + "</td><td>" + hf + "</td><td>" + action + "</td></tr>";
  }
  function loadFiles(c) {
    S.files[c.id] = { loading: true };
    fetch("/checkpoints/" + c.id + "/files.json", { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.json(); })
      .then(function (body) { S.files[c.id] = body; renderCheckpoints(); })
      .catch(function () { delete S.files[c.id]; });
  }
  $("checkpoint-rows").addEventListener("click", function (e) {
    var btn = e.target.closest("button");
    if (!btn) return;
    if (btn.classList.contains("pruned-toggle")) { S.showPruned = !S.showPruned; renderCheckpoints(); return; }
    if (btn.classList.contains("copy")) { copyText(btn.dataset.copy, btn); return; }
    if (!btn.classList.contains("convert")) return;
    btn.disabled = true;
    btn.textContent = "Queuing…";
    post(btn.dataset.url).then(function (res) {
      if (res.body && res.body.checkpoint) applyCheckpoint(res.body.checkpoint);
      else if (!res.ok) { btn.disabled = false; btn.textContent = "Convert"; flash(res.message || "conversion refused"); }
      else {
        var c = S.checkpoints[btn.dataset.id];
        if (c && c.hf_status !== "ready") applyCheckpoint(Object.assign({}, c, { hf_status: "converting", hf_progress: 0 }));
      }
    });
  });
  function copyText(text, btn) {
    function done() { btn.textContent = "Copied"; setTimeout(function () { btn.textContent = "Copy path"; }, 1500); }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else { fallbackCopy(text); done(); }
  }
  function fallbackCopy(text) {
    var ta = document.createElement("textarea");
    ta.value = text; document.body.appendChild(ta); ta.select();
    try { document.execCommand("copy"); } catch (e) { /* the path stays visible to copy by hand */ }
    ta.remove();
  }

  // ------------------------------------------------------------------ samples
  function addSamples(items) {
    if (!items.length) return;
    S.samples = S.samples.concat(items);
    renderSamples();
  }
  // the token view's lists belong to the rollout explorer (/runs/<id>/rollouts/), not the cards
  var SAMPLE_KNOWN = { stage: 1, step: 1, prompt: 1, response: 1, truth: 1, reward: 1, tokens: 1, logprobs: 1, trainer_logprobs: 1 };
  var num = window.RFTFormat.num;
  function sampleCard(s) {
    var extra = Object.keys(s).filter(function (k) { return !SAMPLE_KNOWN[k]; }).map(function (k) {
      return "<dt>" + esc(k) + "</dt><dd>" + esc(typeof s[k] === "object" ? JSON.stringify(s[k]) : s[k]) + "</dd>";
    }).join("");
    var reward = s.reward === null || s.reward === undefined ? "—" : (typeof s.reward === "number" ? s.reward.toFixed(3) : s.reward);
    return '<article class="sample"><div class="reward">reward <strong>' + esc(reward) + "</strong></div><dl>" +
      "<dt>prompt</dt><dd><pre>" + esc(s.prompt || "") + "</pre></dd>" +
      "<dt>response</dt><dd><pre>" + esc(s.response || "") + "</pre></dd>" +
      "<dt>truth</dt><dd><pre>" + esc(s.truth === undefined || s.truth === null ? "" : s.truth) + "</pre></dd>" + extra + "</dl></article>";
  }
  // a DPO trainer's kept pair (rft_core.explorer.rollout_samples.pair_samples): one card, the
  // prompt once, the chosen and the rejected response each with its implicit reward
  function pairCard(pair) {
    var parts = pair.parts || {};
    var sides = ["chosen", "rejected"].filter(function (side) { return pair.sides[side]; }).map(function (side) {
      var s = pair.sides[side];
      return '<dt class="side">' + side + "</dt><dd><pre>" + esc(s.response || "") + '</pre><span class="hint">implicit reward ' +
        esc(num(s.reward, 4)) + "</span></dd>";
    }).join("");
    return '<article class="sample pair" data-group="' + esc(pair.group) + '"><div class="reward">pair ' + esc(pair.group) +
      " · margin <strong>" + esc(num(parts.dpo_margin, 4)) + "</strong> · loss <strong>" + esc(num(parts.dpo_loss, 4)) +
      "</strong></div><dl><dt>prompt</dt><dd><pre>" + esc(pair.prompt || "") + "</pre></dd>" + sides + "</dl></article>";
  }
  function stageCards(items) {
    var cards = [], pairs = {};
    items.forEach(function (s) {
      if (s.side !== "chosen" && s.side !== "rejected") { cards.push(s); return; }
      var key = String(s.group);
      if (!pairs[key]) { pairs[key] = { group: s.group, parts: s.reward_parts, prompt: s.prompt, sides: {} }; cards.push(pairs[key]); }
      pairs[key].sides[s.side] = s;
    });
    return cards.slice(0, SAMPLES_SHOWN).map(function (c) { return c.sides ? pairCard(c) : sampleCard(c); }).join("");
  }
  function renderSamples() {
    var groups = [], byKey = {};
    S.samples.forEach(function (s) {
      var key = (s.stage || "") + "\u0000" + s.step;
      if (!byKey[key]) { byKey[key] = { stage: s.stage || "", step: s.step, items: [] }; groups.push(byKey[key]); }
      byKey[key].items.push(s);
    });
    groups.reverse(); // newest first
    groups = groups.slice(0, SAMPLE_STEPS);
    var html = groups.map(function (g) {
      return '<section class="sample-step" data-step="' + esc(g.step) + '"><h3>' + (g.stage ? esc(g.stage) + " · " : "") + "step " + esc(g.step) + "</h3>" +
        stageCards(g.items) + "</section>";
    }).join("");
    $("samples").innerHTML = html || '<p class="hint">No samples yet.</p>';
  }

  // ------------------------------------------------------------------ events
  function applyEvents(events) {
    var metrics = [], logs = [], samples = [];
    events.forEach(function (ev) {
      if (S.last !== null && ev.seq <= S.last) return;
      S.last = ev.seq;
      switch (ev.kind) {
        case "metric": metrics.push(ev); break;
        case "log": logs.push(logFromEvent(ev)); break;
        case "samples":
          ((ev.data || {}).samples || []).forEach(function (s) {
            // the trainer's log-probs of a kept rollout (stored beside its tokens): not a rollout
            if (s.explorer_step !== undefined && s.prompt === undefined) return;
            samples.push(Object.assign({ stage: ev.stage || "", step: ev.step }, s));
          });
          break;
        case "heartbeat":
          if (S.run) { S.run.last_heartbeat = ev.ts; tick(); }
          break;
        case "checkpoint":
          var d = ev.data || {};
          var known = Object.keys(S.checkpoints).some(function (k) {
            var c = S.checkpoints[k]; return (c.stage || "") === (ev.stage || "") && c.step === ev.step;
          });
          if (!known && ev.step !== null) applyCheckpoint({ stage: ev.stage || "", step: ev.step, path: d.path, hf_status: "absent", created: ev.ts });
          break;
        default: break;
      }
    });
    if (metrics.length) applyMetricEvents(metrics);
    appendLogs(logs);
    addSamples(samples);
  }

  // `events` batches in seq order: what continues our sequence is applied in ONE applyEvents
  // (one extendTraces per trace, one log append); a gap stops there and refetches
  function onBatches(msgs) {
    if (S.last === null) { S.buffer.push.apply(S.buffer, msgs); return; }
    var events = [], last = S.last, gap = false;
    msgs.forEach(function (msg) {
      if (gap || msg.last_seq <= last) return;
      if (msg.first_seq > last + 1) { gap = true; return; }
      // continues (or overlaps) what we have: its tail continues our sequence
      (msg.events || []).forEach(function (ev) { if (ev.seq > last) { events.push(ev); last = ev.seq; } });
    });
    if (events.length) applyEvents(events);
    if (gap) catchUp();
  }

  // The socket's batches wait for the next animation frame and are applied together: beside a
  // busy run (the demo training on the same cores) the page draws once a frame, not per batch.
  // A hidden tab gets no frames: the timer applies them within a second there.
  var frameBatches = [], frameRequest = null, frameTimer = null;
  function flushFrame() {
    if (frameRequest !== null) cancelAnimationFrame(frameRequest);
    clearTimeout(frameTimer);
    frameRequest = frameTimer = null;
    var msgs = frameBatches; frameBatches = [];
    onBatches(msgs);
  }
  function onBatch(msg) {
    frameBatches.push(msg);
    if (frameRequest !== null) return;
    frameRequest = requestAnimationFrame(flushFrame);
    frameTimer = setTimeout(flushFrame, 1000);
  }

  function getJSON(url) {
    return fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" }).then(function (r) {
      if (!r.ok) throw new Error(url + ": HTTP " + r.status);
      return r.json();
    });
  }

  function loadSnapshot() {
    return getJSON(root.dataset.liveUrl).then(function (snap) {
      S.clockSkew = snap.now - Date.now() / 1000;
      S.last = snap.seq || 0;
      applyRun(snap.run);
      var runStart = toUnix(snap.run && (snap.run.started_at || snap.run.created));
      loadMetrics(snap.metrics || {}, snap.stages || [], runStart);
      S.logs = [];
      (snap.logs || []).forEach(noteLogFacets);
      S.logs = (snap.logs || []).slice();
      renderLogs();
      (snap.checkpoints || []).forEach(function (c) { S.checkpoints[String(c.id)] = c; if (c.hf_status === "ready") loadFiles(c); });
      renderCheckpoints();
      S.samples = (snap.samples || []).slice();
      renderSamples();
      var buffered = S.buffer; S.buffer = [];
      onBatches(buffered.sort(function (a, b) { return a.first_seq - b.first_seq; }));
      root.dataset.live = "ready";
    });
  }

  // live.json?after=last, again while `more`; one at a time (a second call asks for one more round)
  function catchUp() {
    if (S.last === null) return Promise.resolve();
    if (S.fetching) { S.fetchAgain = true; return S.fetching; }
    function round() {
      return getJSON(root.dataset.liveUrl + "?after=" + S.last).then(function (body) {
        S.clockSkew = body.now - Date.now() / 1000;
        applyEvents(body.events || []);
        applyRun(body.run);
        // checkpoint states (convert progress) have no seq: the reply carries them all
        (body.checkpoints || []).forEach(applyCheckpoint);
        if (body.more || S.fetchAgain) { S.fetchAgain = false; return round(); }
      });
    }
    S.fetching = round().catch(function (err) { console.warn(err.message); }).then(function () { S.fetching = null; });
    return S.fetching;
  }

  // ------------------------------------------------------------------ socket
  function notice(text) {
    var el = $("live-notice");
    el.hidden = !text;
    el.textContent = text || "";
  }
  function startPolling() {
    if (S.pollTimer) return;
    notice("Live updates paused — polling every 3 s until the connection is back.");
    root.dataset.transport = "polling";
    S.pollTimer = setInterval(catchUp, POLL_MS);
  }
  function stopPolling() {
    if (S.pollTimer) { clearInterval(S.pollTimer); S.pollTimer = null; }
    notice("");
    root.dataset.transport = "websocket";
  }
  function connect() {
    var proto = location.protocol === "https:" ? "wss://" : "ws://";
    var ws;
    try { ws = new WebSocket(proto + location.host + root.dataset.wsPath); } catch (e) { scheduleReconnect(); return; }
    S.ws = ws;
    ws.onopen = function () {
      S.wsOpen = true;
      S.backoff = 1000;
      stopPolling();
      if (S.last !== null) catchUp(); // a reconnect: fetch what was missed
    };
    ws.onmessage = function (e) {
      var msg;
      try { msg = JSON.parse(e.data); } catch (err) { return; }
      if (msg.type === "events") onBatch(msg);
      else if (msg.type === "run") onRunMessage(msg.run);
      else if (msg.type === "checkpoint") applyCheckpoint(msg.checkpoint);
    };
    ws.onclose = function (e) {
      S.wsOpen = false;
      S.ws = null;
      if (e.code === 4403 || e.code === 4404) { notice("Live updates refused (" + e.code + "): reload the page after signing in."); return; }
      startPolling();
      scheduleReconnect();
    };
  }
  function scheduleReconnect() {
    var wait = S.backoff;
    S.backoff = Math.min(S.backoff * 2, 30000);
    setTimeout(connect, wait);
  }

  // ------------------------------------------------------------------ actions
  function flash(text) {
    var el = $("live-notice");
    el.hidden = false;
    el.textContent = text;
  }
  function post(url) {
    return fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    }).then(function (r) {
      var type = r.headers.get("Content-Type") || "";
      if (type.indexOf("json") < 0) return { ok: r.ok, body: null };
      return r.json().then(function (body) {
        return { ok: r.ok, body: body, message: body.error || body.message || body.detail };
      });
    }).catch(function (err) { return { ok: false, body: null, message: err.message }; });
  }
  $("cancel-form").addEventListener("submit", function (e) {
    e.preventDefault();
    var btn = $("cancel-button");
    btn.disabled = true;
    post(root.dataset.cancelUrl).then(function (res) {
      btn.disabled = false;
      if (res.body && res.body.run) { applyRun(res.body.run); return; }
      if (!res.ok) { flash(res.message || "cancel refused"); return; }
      if (S.run) applyRun(Object.assign({}, S.run, { cancel_requested: true }));
      catchUp();
    });
  });

  connect();
  loadSnapshot().catch(function (err) {
    notice("Could not load the run's data (" + err.message + "); retrying…");
    var retry = setInterval(function () {
      loadSnapshot().then(function () { clearInterval(retry); if (S.wsOpen) notice(""); }, function () {});
    }, POLL_MS);
  });
})();
