// The run page's progress header (window.RFTProgress): the stage (n of m), the step of the
// stage with its bar, the whole run's fraction with one bar per stage, the ETA and what the
// run is doing now, and the stage's headline figure. The figures come from the run state (webapp/runs/progress.py: stage_step,
// stage_total_steps, stage_index, stage_count, stages, run_fraction, stage_eta_s, run_eta_s,
// progress_at, machine_busy, phase, phases); only the ETA's countdown between two states is done here.
(function () {
  "use strict";

  var PHASE_TEXT = {
    rollout: "generating rollouts", train: "training", eval: "evaluating",
    checkpoint: "saving a checkpoint", waiting: "waiting",
  };
  var WAITING_FOR = { explorer: "for new weights", trainer: "for experiences" };

  function $(id) { return document.getElementById(id); }

  function fmtDuration(s) {
    if (s === null || s === undefined || !isFinite(s)) return "—";
    s = Math.max(0, Math.round(s));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + sec + "s";
    return sec + "s";
  }

  function pct(f) { return (f === null || f === undefined) ? "—" : Math.floor(f * 100) + "%"; }

  // ETA now: the server's figure less the time since it was computed (never below 0).
  function etaNow(eta, at, now) {
    if (eta === null || eta === undefined) return null;
    return Math.max(0, eta - Math.max(0, now - (at || now)));
  }

  function roleText(role, p) {
    var text = PHASE_TEXT[p.phase] || p.phase;
    if (p.phase === "waiting" && WAITING_FOR[role]) text += " " + WAITING_FOR[role];
    return role + ": " + text + (p.step !== null && p.step !== undefined ? " (step " + p.step + ")" : "");
  }

  // Draw what the run state says (called on every new state).
  function render(run) {
    if (!run) return;
    var stepOf = run.stage_step !== undefined ? run.stage_step : run.step;
    var total = run.stage_total_steps !== undefined ? run.stage_total_steps : run.total_steps;
    $("run-stage").textContent = run.stage || (run.stage_count > 1 ? "—" : (run.stage_count === 1 ? "the run" : "—"));
    $("run-stage-of").textContent = run.stage_count > 1 && run.stage_index !== null && run.stage_index !== undefined
      ? "stage " + (run.stage_index + 1) + " of " + run.stage_count : "";
    var stepText = stepOf === null || stepOf === undefined ? "—" : String(stepOf);
    if (total) stepText += " / " + total;
    $("run-step").textContent = stepText;
    var bar = $("run-progress");
    if (total && stepOf !== null && stepOf !== undefined) {
      bar.hidden = false; bar.max = total; bar.value = Math.min(stepOf, total);
    } else bar.hidden = true;

    var stages = run.stages || [];
    $("run-total").textContent = run.run_fraction === null || run.run_fraction === undefined ? "—" : pct(run.run_fraction);
    $("run-stage-bars").innerHTML = stages.map(function (s, i) {
      var current = i === run.stage_index;
      var title = (s.name || "run") + ": " + pct(s.fraction) + (s.total_steps ? " of " + s.total_steps + " steps" : " (by epochs)");
      // each stage's bar as wide as its share of the run's steps (equal when one runs by epochs)
      var grow = stages.every(function (t) { return t.total_steps; }) ? s.total_steps : 1;
      return '<div class="stage-bar' + (current ? " current" : "") + '" style="flex-grow:' + grow + '" data-stage="' +
        RFTCharts.escapeHtml(s.name) + '" title="' + RFTCharts.escapeHtml(title) + '"><span style="width:' +
        Math.round((s.fraction || 0) * 1000) / 10 + '%"></span><small>' + RFTCharts.escapeHtml(s.name || "run") + "</small></div>";
    }).join("");

    // the stage's headline: its reward, or (SFT) its own metric (webapp/runs/models.py)
    var head = run.headline, headline = $("run-headline");
    if (headline && head) {
      $("run-headline-label").textContent = head.label;
      headline.dataset.metric = head.name;
      headline.textContent = head.value === null || head.value === undefined ? "—" : Number(head.value).toFixed(3);
    }

    var phase = $("run-phase");
    phase.dataset.phase = run.phase || "";
    phase.textContent = run.phase ? (PHASE_TEXT[run.phase] || run.phase) : "—";
    var roles = run.phases || {};
    $("run-phase-roles").textContent = Object.keys(roles).sort().map(function (r) { return roleText(r, roles[r]); }).join(" · ");
  }

  // Once a second: the ETA counts down; a phase shows how long it has lasted.
  function tick(run, now) {
    if (!run) return;
    var stage = etaNow(run.stage_eta_s, run.progress_at, now);
    var whole = etaNow(run.run_eta_s, run.progress_at, now);
    var text = "";
    if (stage !== null) {
      text = "ETA " + fmtDuration(stage) + (run.stage_count > 1 ? (whole !== null ? " (end of run)" : " (end of this stage)") : "");
      // the rate of the newest steps (webapp/runs/progress.py): say so, and when it is well
      // below the stage's earlier rate, that the machine is busy
      if (run.step_rate) text += " · at the recent " + (run.step_rate >= 1 ? run.step_rate.toFixed(2) + " steps/s" : fmtDuration(1 / run.step_rate) + "/step");
      if (run.machine_busy) text += " · machine busy: slower than this stage's start";
    }
    $("run-eta").textContent = text;
    var phase = $("run-phase");
    var roles = run.phases || {};
    var since = null;
    Object.keys(roles).forEach(function (r) {
      if (roles[r].phase === run.phase && roles[r].since && (since === null || roles[r].since < since)) since = roles[r].since;
    });
    phase.title = since ? "for " + fmtDuration(now - since) : "";
    if (run.phase && since) phase.textContent = (PHASE_TEXT[run.phase] || run.phase) + " · " + fmtDuration(now - since);
  }

  window.RFTProgress = { render: render, tick: tick, etaNow: etaNow, fmtDuration: fmtDuration, PHASE_TEXT: PHASE_TEXT };
})();
