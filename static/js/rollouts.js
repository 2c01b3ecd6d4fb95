/* The rollout explorer (/runs/<id>/rollouts/): reads rollouts.json (webapp/runs/rollouts.py)
   for the chosen step, sort, search and page, and shows the rollouts step by step, each step's
   task groups foldable with their reward mean and spread (or in the chosen order, flat), each with its reward parts, advantage, length, cut flag and a token view that
   colours every response token by the log-prob it was sampled with (red: unlikely, green:
   likely), or where the trainer recorded its own log-prob of the token by that one or by their
   difference (trainer − rollout: the train/inference mismatch), all three in the tooltip. A DPO
   run's pairs (the trainer's own entries: a group is a pair, each row a side) were not sampled,
   so their tokens are coloured by the trainer's log-prob alone. The query lives in the URL so
   a view can be linked. */
(function () {
  "use strict";
  var root = document.getElementById("rollout-explorer");
  if (!root) return;
  var URL_ = root.dataset.url;
  var $ = function (id) { return document.getElementById(id); };
  var S = { stage: null, step: "", sort: "group", q: "", page: 1, steps: [], pages: 1, colour: "rollout", body: null };

  function esc(v) {
    return String(v === null || v === undefined ? "" : v).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  var num = window.RFTFormat.num;
  // the search text marked in a text (escaped first)
  function marked(text) {
    var html = esc(text);
    if (!S.q) return html;
    var needle = esc(S.q).replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    return html.replace(new RegExp(needle, "gi"), function (m) { return "<mark>" + m + "</mark>"; });
  }

  // ------------------------------------------------------------------ query <-> URL
  function readLocation() {
    var p = new URLSearchParams(window.location.search);
    S.stage = p.has("stage") ? p.get("stage") : null;
    S.step = p.get("step") || "";
    S.sort = p.get("sort") || "group";
    S.q = p.get("q") || "";
    S.page = parseInt(p.get("page") || "1", 10) || 1;
  }
  function params() {
    var p = new URLSearchParams();
    if (S.stage !== null) p.set("stage", S.stage);
    if (S.step !== "") p.set("step", S.step);
    if (S.sort !== "group") p.set("sort", S.sort);
    if (S.q) p.set("q", S.q);
    if (S.page > 1) p.set("page", String(S.page));
    return p;
  }

  function load() {
    var p = params();
    var qs = p.toString();
    window.history.replaceState(null, "", window.location.pathname + (qs ? "?" + qs : ""));
    return fetch(URL_ + (qs ? "?" + qs : ""), { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        return r.json().then(function (body) {
          if (!r.ok) throw new Error(body.detail || ("HTTP " + r.status));
          return body;
        });
      })
      .then(function (body) {
        $("rollout-error").hidden = true;
        render(body);
        root.dataset.loaded = qs; // the query now shown (browser tests wait on it)
      })
      .catch(function (err) {
        $("rollout-error").textContent = "Could not load the rollouts: " + err.message;
        $("rollout-error").hidden = false;
      });
  }

  // ------------------------------------------------------------------ rendering
  function stepLabel(s) {
    return (s.stage ? s.stage + " · " : "") + "step " + s.step + " (" + s.samples + ", reward " + num(s.reward_mean) + ")";
  }
  // the picker's values are the steps themselves (a stage's name beside, in data-stage)
  function renderSteps(body) {
    S.steps = body.steps;
    var html = body.steps.map(function (s) {
      return '<option value="' + esc(s.step) + '" data-stage="' + esc(s.stage) + '">' + esc(stepLabel(s)) + "</option>";
    }).reverse().join("");
    html += '<option value="all">all steps</option>';
    var select = $("rollout-step");
    select.innerHTML = html;
    Array.prototype.forEach.call(select.options, function (o, i) {
      if (body.step === "all" ? o.value === "all" : o.value === String(body.step) && o.dataset.stage === body.stage) select.selectedIndex = i;
    });
  }

  function parts(r) {
    var p = r.reward_parts || {};
    return Object.keys(p).map(function (k) {
      return '<span class="part">' + esc(k) + ' <span class="value">' + num(p[k]) + "</span></span>";
    }).join("");
  }

  function tokenColour(lp) {
    if (typeof lp !== "number") return "transparent";
    var prob = Math.exp(lp);
    return "hsl(" + Math.round(120 * prob) + "," + (prob > 0.5 ? 55 : 75) + "%,82%)";
  }
  // trainer − rollout log-prob: white at 0, blue where the trainer finds the token likelier,
  // orange where it finds it less likely; full colour at |Δ| >= DIFF_FULL
  var DIFF_FULL = 0.5;
  function diffColour(d) {
    if (typeof d !== "number") return "transparent";
    var share = Math.min(Math.abs(d) / DIFF_FULL, 1);
    return "hsl(" + (d >= 0 ? 210 : 25) + ",80%," + Math.round(97 - 25 * share) + "%)";
  }
  function isNum(v) { return typeof v === "number" && isFinite(v); }
  function mean(values) {
    var xs = values.filter(isNum);
    return xs.length ? xs.reduce(function (a, b) { return a + b; }, 0) / xs.length : null;
  }
  var COLOUR_BY = {
    rollout: "the log-prob it was sampled with",
    trainer: "the trainer's log-prob",
    diff: "trainer − rollout log-prob",
  };
  function tokenView(r) {
    var t = r.tokens || {};
    if (!t.tokens || !t.tokens.length) return '<p class="hint">No tokens recorded for this rollout (monitor.rollout_token_logprobs).</p>';
    var trainer = t.trainer_logprobs, rollout = t.logprobs || [];
    // a DPO pair's response was not sampled: the trainer's log-probs are all there is
    var sampled = !!t.logprobs;
    var by = !trainer ? "rollout" : sampled ? S.colour : "trainer";
    var diffs = t.tokens.map(function (tok, i) {
      return trainer && isNum(trainer[i]) && isNum(rollout[i]) ? trainer[i] - rollout[i] : null;
    });
    var spans = t.tokens.map(function (tok, i) {
      var lp = rollout[i], tl = trainer ? trainer[i] : null, d = diffs[i];
      var title = JSON.stringify(tok) + (sampled ? "  rollout log-prob " + num(lp, 4) + (isNum(lp) ? " (p " + Math.exp(lp).toFixed(3) + ")" : "") : "");
      if (trainer) title += "  trainer " + num(tl, 4) + (isNum(tl) ? " (p " + Math.exp(tl).toFixed(3) + ")" : "") + (sampled ? "  Δ " + num(d, 4) : "");
      var colour = by === "diff" ? diffColour(d) : tokenColour(by === "trainer" ? tl : lp);
      return '<span class="token" data-logprob="' + esc(lp) + '"' +
        (trainer ? ' data-trainer-logprob="' + esc(tl) + '" data-diff="' + esc(d === null ? "" : d.toFixed(4)) + '"' : "") +
        ' style="background:' + colour + '" title="' + esc(title) + '">' + esc(tok) + "</span>";
    }).join("");
    var scale = by === "diff"
      ? "Δ −" + DIFF_FULL + ' <span class="scale diff"></span> +' + DIFF_FULL
      : 'p 0 <span class="scale"></span> 1';
    var absDiffs = diffs.filter(isNum).map(Math.abs);
    var view = '<div class="token-view" data-colour="' + by + '" aria-label="response tokens coloured by ' + esc(COLOUR_BY[by]) + '">' + spans + "</div>";
    if (!sampled && trainer) {
      return view + '<p class="token-legend">' + esc(COLOUR_BY[by]) + ": " + scale + " · " + t.tokens.length + " tokens, mean trainer log-prob " + num(mean(trainer), 3) +
        ", sum " + num(r.logprob_sum, 3) + (isNum(r.reference_logprob_sum) ? " (reference " + num(r.reference_logprob_sum, 3) + ")" : "") +
        (r.trainer_step !== undefined && r.trainer_step !== null ? " at trainer step " + esc(r.trainer_step) : "") + " · not sampled by a rollout engine</p>";
    }
    return view +
      '<p class="token-legend">' + esc(COLOUR_BY[by]) + ": " + scale + " · " + t.tokens.length + " tokens, mean log-prob " + num(mean(rollout), 3) +
      (trainer ? " (trainer " + num(mean(trainer), 3) + "), mean Δ " + num(mean(diffs), 4) + ", max |Δ| " + num(absDiffs.length ? Math.max.apply(null, absDiffs) : null, 4) +
        (r.trainer_step !== undefined && r.trainer_step !== null ? " at trainer step " + esc(r.trainer_step) : "") : " · no trainer log-probs recorded") + "</p>";
  }

  function rolloutHtml(r) {
    return '<article class="rollout" data-id="' + esc(r.id) + '" data-reward="' + esc(r.reward) + '" data-advantage="' + esc(r.advantage) + '">' +
      '<div class="rollout-figures">' +
      (r.side ? '<span class="side">' + esc(r.side) + "</span>" : "") +
      '<span>reward <span class="value reward">' + num(r.reward) + "</span></span>" + parts(r) +
      '<span>advantage <span class="value advantage">' + num(r.advantage) + "</span></span>" +
      '<span>length <span class="value length">' + esc(r.response_length === null ? "—" : r.response_length) + "</span></span>" +
      (r.truncated ? '<span class="cut" title="the response hit max tokens">cut at max tokens</span>' : "") +
      (S.sort !== "group" ? '<span class="hint">' + (r.stage ? esc(r.stage) + " · " : "") + "step " + esc(r.step) + " · group " + esc(r.group) + "</span>" : "") +
      "</div><dl>" +
      "<dt>prompt</dt><dd><pre>" + marked(r.prompt) + "</pre></dd>" +
      "<dt>response</dt><dd><pre>" + marked(r.response) + "</pre></dd>" +
      "<dt>truth</dt><dd><pre>" + marked(r.truth) + "</pre></dd>" +
      '</dl><details class="tokens"><summary>Tokens</summary>' + tokenView(r) + "</details></article>";
  }

  // step -> task group (folding, its reward mean and spread over all its rollouts) -> rollout
  function groupKey(stage, step, group) { return [stage, step, group].join("\u0000"); }
  function groupHeading(g, rs, summary) {
    var r0 = rs[0];
    if (r0.side) {
      var p = r0.reward_parts || {};
      return "Pair " + esc(g) + " · margin " + num(p.dpo_margin, 4) + " · loss " + num(p.dpo_loss, 4);
    }
    summary = summary || {};
    var spread = isNum(summary.reward_std) ? " · spread (std) " + num(summary.reward_std) : "";
    var range = isNum(summary.reward_min) ? " · range " + num(summary.reward_min) + " – " + num(summary.reward_max) : "";
    return "Task group " + esc(g) + (r0.task_index !== undefined ? " · task " + esc(r0.task_index) : "") +
      " · " + esc(summary.samples || rs.length) + " sample" + ((summary.samples || rs.length) === 1 ? "" : "s") +
      ' · reward mean <span class="value group-mean">' + num(summary.reward_mean) + "</span>" +
      '<span class="group-spread">' + spread + "</span>" + range +
      " · truth " + esc(String(r0.truth || "").trim().split("\n").pop());
  }
  function groupedHtml(items, summaries) {
    var bySummary = {};
    summaries.forEach(function (g) { bySummary[groupKey(g.stage, g.step, g.group)] = g; });
    var steps = [], byStep = {};
    items.forEach(function (r) {
      var sk = groupKey(r.stage, r.step, "");
      if (!byStep[sk]) { byStep[sk] = { stage: r.stage, step: r.step, groups: [], byGroup: {} }; steps.push(byStep[sk]); }
      var st = byStep[sk], gk = String(r.group);
      if (!st.byGroup[gk]) { st.byGroup[gk] = []; st.groups.push(gk); }
      st.byGroup[gk].push(r);
    });
    return steps.map(function (st) {
      var info = S.steps.filter(function (s) { return s.stage === st.stage && s.step === st.step; })[0];
      var title = (st.stage ? esc(st.stage) + " · " : "") + "step " + esc(st.step) +
        (info ? " · " + esc(info.samples) + " rollouts · reward mean " + num(info.reward_mean) : "");
      return '<section class="rollout-step" data-stage="' + esc(st.stage) + '" data-step="' + esc(st.step) + '"><h2>' + title + "</h2>" +
        st.groups.map(function (g) {
          var rs = st.byGroup[g], summary = bySummary[groupKey(st.stage, st.step, rs[0].group)];
          return '<details class="rollout-group" open data-group="' + esc(g) + '" data-step="' + esc(st.step) + '"' +
            (summary ? ' data-reward-mean="' + esc(summary.reward_mean) + '" data-reward-std="' + esc(summary.reward_std) + '"' : "") +
            "><summary><h3>" + groupHeading(g, rs, summary) + "</h3></summary>" + rs.map(rolloutHtml).join("") + "</details>";
        }).join("") + "</section>";
    }).join("");
  }

  function render(body) {
    S.body = body; // kept: a new colouring re-renders it without a request
    renderSteps(body);
    S.stage = body.stage; S.page = body.page; S.pages = body.pages;
    S.step = body.step === null || body.step === undefined ? "" : String(body.step);
    $("rollout-sort").value = body.sort;
    $("rollout-q").value = body.q;
    var items = body.items;
    var html;
    if (!items.length) {
      html = '<p class="hint">' + (body.steps.length ? "No rollouts match." : "No rollouts kept yet: they appear after the explorer's first step.") + "</p>";
    } else if (body.sort === "group") {
      html = groupedHtml(items, body.groups || []);
    } else {
      html = items.map(rolloutHtml).join("");
    }
    $("rollout-list").innerHTML = html;
    $("rollout-summary").textContent = body.total + " rollout" + (body.total === 1 ? "" : "s") + (body.q ? " matching “" + body.q + "”" : "");
    $("rollout-page").textContent = "page " + body.page + " of " + body.pages;
    $("rollout-prev").disabled = body.page <= 1;
    $("rollout-next").disabled = body.page >= body.pages;
  }

  // ------------------------------------------------------------------ controls
  $("rollout-step").addEventListener("change", function () {
    var o = this.options[this.selectedIndex];
    if (o.value === "all") { S.step = "all"; S.stage = null; } else { S.step = o.value; S.stage = o.dataset.stage; }
    S.page = 1;
    load();
  });
  $("rollout-sort").addEventListener("change", function () { S.sort = this.value; S.page = 1; load(); });
  $("rollout-colour").addEventListener("change", function () {
    S.colour = this.value;
    if (!S.body) return;
    var open = Array.from(document.querySelectorAll("#rollout-list .rollout")).filter(function (a) {
      return a.querySelector("details.tokens").open;
    }).map(function (a) { return a.dataset.id; });
    render(S.body);
    open.forEach(function (id) { // the token views that were open stay open
      var a = document.querySelector('#rollout-list .rollout[data-id="' + id + '"] details.tokens');
      if (a) a.open = true;
    });
  });
  $("rollout-controls").addEventListener("submit", function (e) {
    e.preventDefault();
    S.q = $("rollout-q").value.trim(); S.page = 1;
    load();
  });
  $("rollout-prev").addEventListener("click", function () { if (S.page > 1) { S.page -= 1; load(); } });
  $("rollout-next").addEventListener("click", function () { if (S.page < S.pages) { S.page += 1; load(); } });

  readLocation();
  load();
})();
