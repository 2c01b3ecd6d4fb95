// Metric charts shared by the run page and the compare page (window.RFTCharts), vanilla JS over
// the vendored Plotly (static/vendor/plotly.min.js; SVG `scatter` traces only, never WebGL).
//
// - groupOf(name) / groupNames(names): Trinity's metric names sorted into the page's groups
//   (SFT's loss and token accuracy, accuracy, reward, losses, KL, entropy, grad norm, clip
//   fraction, response length, throughput, timing, system, other): a stage without a reward
//   (SFT) shows no reward group, and a timing (time/reward) is never taken for a reward.
// - ema(values, weight) and EmaState: TensorBoard's debiased EMA (s = s*w + (1-w)*x;
//   s / (1 - w^n)); null (NaN/inf) points stay null and do not move the average.
// - Timeline: a run's start and ordered stages; places a point on the x axis for a mode:
//   "stage" (the steps of one stage, from its own 0: GRPO after an SFT warmup starts at 0),
//   "step" (the whole run: a later stage's steps after the earlier stage's last step), "wall"
//   (date axis), "relative" (seconds since the run's start). Its bands() are the stages' spans.
// - Board: one chart per metric, in group sections (a pinned chart in "Pinned" on top; a pinned
//   group's section right below it, with every chart of the group), each series drawn twice
//   (raw faintly, the smoothed curve on top; a series too short to smooth is drawn as it is,
//   static/js/chart_rules.js); setData / extend (live points, Plotly.extendTraces) /
//   setSmoothing / setXMode / setStage / setLogY / setSelected / pin / pinGroup. Pins, of
//   charts and of groups, are remembered in this browser (localStorage).
// - Picker: checkboxes per group (with all/none) choosing the metrics the Board draws.
//
// A series: {id, label, color, timeline, step: [], wall_time: [], value: [], stage: []}.
(function () {
  "use strict";

  var GROUPS = [
    { key: "sft", title: "SFT" },
    { key: "accuracy", title: "Accuracy" },
    { key: "reward", title: "Reward" },
    { key: "loss", title: "Losses" },
    { key: "kl", title: "KL" },
    { key: "entropy", title: "Entropy" },
    { key: "grad_norm", title: "Grad norm" },
    { key: "clipfrac", title: "Clip fraction" },
    { key: "response_length", title: "Response length" },
    { key: "perf", title: "Throughput" },
    { key: "timing", title: "Timing" },
    { key: "system", title: "System (CPU, memory, GPU)" },
    { key: "other", title: "Other" },
  ];
  var R = window.RFTChartRules;
  var PIN_KEY = "rft.pinned-charts";
  var GROUP_PIN_KEY = "rft.pinned-chart-groups";
  var GROUP_TITLES = { pinned: "Pinned" };
  GROUPS.forEach(function (g) { GROUP_TITLES[g.key] = g.title; });

  var PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                 "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];

  function groupOf(name) {
    var n = String(name).toLowerCase();
    if (/^system\//.test(n)) return "system"; // system/<role>/...: rft_core.monitor.system
    // timings first: time/reward is the seconds the reward took, not a reward
    if (/^(time|timing_s|timing)\//.test(n)) return "timing";
    // an SFT stage's headline: its loss and token accuracy (actor/sft_loss, actor/sft_token_accuracy)
    if (/^actor\/sft_/.test(n)) return "sft";
    if (/^eval\/.+\/accuracy\//.test(n) || /^rollout\/accuracy\//.test(n) ||
        /(^|\/|_)accuracy/.test(n)) return "accuracy";
    if (/^critic\/(rewards|score)/.test(n) || (/^rollout\//.test(n) && n.indexOf("reward") >= 0) ||
        /(^|\/)reward/.test(n)) return "reward";
    if (n.indexOf("clipfrac") >= 0 || n.indexOf("clip_frac") >= 0) return "clipfrac";
    if (/^perf\//.test(n) || n.indexOf("throughput") >= 0) return "perf";
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
    if (mode === "stage") return step === null || step === undefined ? null : step;
    if (mode === "relative") return this.start === null ? 0 : wallTime - this.start;
    if (step === null || step === undefined) return null;
    return step + this.offset(stage);
  };
  // Each stage's span on the x axis, for its band: [{x0, x1, name}] (none in "stage" mode).
  Timeline.prototype.bands = function (mode) {
    var out = [];
    if (mode === "stage") return out;
    for (var i = 0; i < this.stages.length; i++) {
      var s = this.stages[i], next = this.stages[i + 1];
      var x0, x1;
      if (mode === "step") {
        x0 = this.offset(s.name);
        x1 = x0 + (this.maxStep[s.name] || 0);
      } else {
        if (s.start === null || s.start === undefined) continue;
        var end = next && next.start ? next.start : (s.end || s.start);
        x0 = mode === "wall" ? s.start * 1000 : s.start - (this.start || s.start);
        x1 = mode === "wall" ? end * 1000 : end - (this.start || s.start);
      }
      out.push({ x0: x0, x1: x1, name: s.name, index: i });
    }
    return out;
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
  var AXIS_TITLES = { stage: "step of the stage", step: "step (whole run)", wall: "wall time", relative: "time since start (s)" };
  var BAND_COLORS = ["rgba(46,144,250,0.06)", "rgba(105,65,198,0.06)", "rgba(23,128,61,0.06)"];

  function fmtWall(ts) {
    return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC" : "";
  }
  function loadPinned(key) {
    try { return new Set(JSON.parse(window.localStorage.getItem(key || PIN_KEY) || "[]")); } catch (e) { return new Set(); }
  }

  function savePinned(key, set) {
    try { window.localStorage.setItem(key, JSON.stringify(Array.from(set))); } catch (e) { /* private mode */ }
  }

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
    this.stage = null; // "stage" mode: the stage shown (null: the newest)
    this.logY = false;
    this.pinned = loadPinned(PIN_KEY);
    this.pinnedGroups = loadPinned(GROUP_PIN_KEY);
    this.metrics = {}; // name -> [series]
    this.charts = {}; // name -> {div, ema: {seriesId: EmaState}}
    this.sections = {};
    // Live points reach only the charts on screen (or within 200 px of it): the run page of a
    // run of ~20 metrics spent ~2/3 of a core in Plotly beside the demo training on the same two
    // cores, 4 of 5 calls for charts nobody saw. An off-screen chart keeps its points in
    // this.metrics and is drawn whole when it comes into view.
    this._observer = typeof IntersectionObserver === "function"
      ? new IntersectionObserver(this._onScreen.bind(this), { rootMargin: "200px 0px" }) : null;
  }

  Board.prototype._onScreen = function (entries) {
    var self = this;
    entries.forEach(function (entry) {
      var chart = self.charts[entry.target.dataset.metric];
      if (!chart) return;
      chart.onScreen = entry.isIntersecting;
      if (chart.onScreen && chart.stale) { chart.stale = false; self._draw(entry.target.dataset.metric); }
    });
  };

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

  // The stages any series knows, in run order (union over the series' timelines).
  Board.prototype.stageNames = function () {
    var seen = [], self = this;
    Object.keys(this.metrics).forEach(function (name) {
      self.metrics[name].forEach(function (s) {
        s.timeline.stages.forEach(function (st) { if (seen.indexOf(st.name) < 0) seen.push(st.name); });
      });
    });
    return seen;
  };
  Board.prototype.viewStage = function () {
    if (this.stage !== null) return this.stage;
    var names = this.stageNames();
    return names.length ? names[names.length - 1] : "";
  };
  // In "stage" mode only the points of the stage shown are drawn.
  Board.prototype._inView = function (stage) {
    return this.xMode !== "stage" || !this.stageNames().length || (stage || "") === this.viewStage();
  };

  Board.prototype._section = function (groupKey) {
    if (this.sections[groupKey]) return this.sections[groupKey];
    var sec = document.createElement("section");
    sec.className = "chart-group";
    sec.dataset.group = groupKey;
    // the pin button sits beside the heading, not inside it (the heading's text stays its title)
    sec.innerHTML = '<div class="group-head"><h3>' + escapeHtml(GROUP_TITLES[groupKey]) +
      '</h3></div><div class="chart-grid"></div>';
    if (groupKey !== "pinned") {
      var self = this;
      var pin = document.createElement("button");
      pin.type = "button";
      pin.className = "pin-group";
      pin.dataset.group = groupKey;
      pin.addEventListener("click", function () { self.pinGroup(groupKey, !self.pinnedGroups.has(groupKey)); });
      sec.querySelector(".group-head").appendChild(pin);
    }
    this.sections[groupKey] = sec;
    this._placeSection(groupKey);
    return sec;
  };

  // Sections in page order: "Pinned" (single charts), the pinned groups, the other groups (each
  // part in GROUPS order).
  Board.prototype._sectionOrder = function () {
    var keys = GROUPS.map(function (g) { return g.key; });
    var pinned = this.pinnedGroups;
    return ["pinned"]
      .concat(keys.filter(function (k) { return pinned.has(k); }))
      .concat(keys.filter(function (k) { return !pinned.has(k); }));
  };

  Board.prototype._placeSection = function (groupKey) {
    var sec = this.sections[groupKey];
    var order = this._sectionOrder();
    var before = null;
    var kids = this.container.querySelectorAll(":scope > section.chart-group");
    for (var i = 0; i < kids.length; i++) {
      if (kids[i] !== sec && order.indexOf(kids[i].dataset.group) > order.indexOf(groupKey)) { before = kids[i]; break; }
    }
    if (sec.nextElementSibling !== before || sec.parentNode !== this.container) this.container.insertBefore(sec, before);
    var pin = sec.querySelector(":scope > .group-head > button.pin-group");
    if (pin) {
      var on = this.pinnedGroups.has(groupKey);
      pin.textContent = on ? "Unpin group" : "Pin group";
      pin.setAttribute("aria-pressed", on ? "true" : "false");
      sec.classList.toggle("pinned-group", on);
    }
  };

  // Pin a metric group (its section, every chart of it, on top below "Pinned"; remembered in
  // this browser) or unpin it.
  Board.prototype.pinGroup = function (groupKey, on) {
    if (!GROUP_TITLES[groupKey] || groupKey === "pinned") throw new Error("unknown chart group " + groupKey);
    if (on) this.pinnedGroups.add(groupKey); else this.pinnedGroups.delete(groupKey);
    savePinned(GROUP_PIN_KEY, this.pinnedGroups);
    var self = this;
    this._sectionOrder().forEach(function (key) { if (self.sections[key]) self._placeSection(key); });
  };

  Board.prototype._points = function (s, from) {
    var pts = { x: [], raw: [], custom: [] };
    for (var i = from || 0; i < s.value.length; i++) {
      if (!this._inView(s.stage[i])) continue;
      pts.x.push(s.timeline.x(this.xMode, s.step[i], s.wall_time[i], s.stage[i]));
      pts.raw.push(s.value[i]);
      pts.custom.push([s.step[i], R.fmtValue(s.value[i]), s.stage[i] || "", fmtWall(s.wall_time[i])]);
    }
    return pts;
  };

  Board.prototype._traces = function (name) {
    var self = this;
    var traces = [];
    var charts = this.charts[name];
    charts.ema = {};
    charts.smoothed = {};
    this.metrics[name].forEach(function (s) {
      var pts = self._points(s, 0);
      // too few points to smooth (an eval series): drawn as they are, with their markers
      var weight = R.smoothingFor(pts.raw.length, self.smoothing);
      var state = new EmaState(weight);
      var smooth = pts.raw.map(function (v) { return state.push(v); });
      charts.ema[s.id] = state;
      charts.smoothed[s.id] = weight > 0;
      var hover = (s.label ? escapeHtml(s.label) + "<br>" : "") +
        "%{customdata[2]} step %{customdata[0]}<br>%{customdata[3]}<br>value %{customdata[1]}" +
        (weight > 0 ? "<br>smoothed %{y:.4~g}" : "") + "<extra></extra>";
      traces.push({
        type: "scatter", mode: "lines", name: (s.label || name) + " (raw)", x: pts.x, y: pts.raw,
        line: { color: s.color, width: 1 }, opacity: weight > 0 ? 0.25 : 0, hoverinfo: "skip", showlegend: false,
        meta: { series: s.id, kind: "raw" }, connectgaps: false,
      });
      traces.push({
        type: "scatter", mode: weight > 0 ? "lines" : "lines+markers",
        name: s.label || name, x: pts.x.slice(), y: smooth, customdata: pts.custom,
        line: { color: s.color, width: 2 }, marker: { size: 5 }, hovertemplate: hover,
        meta: { series: s.id, kind: "smoothed" }, connectgaps: true,
      });
    });
    return traces;
  };

  // The chart's title: its name and where each series is now (the last raw value, which
  // smoothing never hides).
  Board.prototype._title = function (name) {
    var self = this;
    var series = this.metrics[name];
    var lasts = series.map(function (s) {
      var vals = [], steps = [];
      for (var i = 0; i < s.value.length; i++) if (self._inView(s.stage[i])) { vals.push(s.value[i]); steps.push(s.step[i]); }
      var last = R.lastValue(vals, steps);
      return last ? (series.length > 1 && s.label ? escapeHtml(s.label) + " " : "") + R.fmtValue(last.value) +
        (last.step !== null && last.step !== undefined ? " @" + last.step : "") : "";
    }).filter(Boolean);
    return escapeHtml(name) + (lasts.length ? ' <span style="font-size:11px;color:#5b6472">last ' + lasts.join(", ") + "</span>" : "");
  };

  // Steps are whole numbers: ticks on whole steps, 1, 2 or 5 x 10^k apart, at most MAX_XTICKS
  // of them (a step axis of 490 steps gets 0, 100, 200, ..., never one label per step).
  var MAX_XTICKS = 8;
  function stepTick(span) {
    var dtick = 1;
    for (var k = 0; span / dtick > MAX_XTICKS; k++) dtick = [1, 2, 5][(k + 1) % 3] * Math.pow(10, Math.floor((k + 1) / 3));
    return dtick;
  }
  Board.prototype._xticks = function (name) {
    if (this.xMode !== "stage" && this.xMode !== "step") return { tickformat: "", dtick: null, tick0: null };
    var self = this, lo = Infinity, hi = -Infinity;
    this.metrics[name].forEach(function (s) {
      for (var i = 0; i < s.value.length; i++) {
        if (!self._inView(s.stage[i])) continue;
        var x = s.timeline.x(self.xMode, s.step[i], s.wall_time[i], s.stage[i]);
        if (x !== null) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
      }
      // the stage bands widen the axis as far as the points do
      if (s.timeline.stages.length > 1) s.timeline.bands(self.xMode).forEach(function (b) { lo = Math.min(lo, b.x0); hi = Math.max(hi, b.x1); });
    });
    return { tickformat: "~d", dtick: hi >= lo ? stepTick(hi - lo) : null, tick0: 0 };
  };

  Board.prototype._yaxis = function (name) {
    var self = this, values = [];
    this.metrics[name].forEach(function (s) {
      for (var i = 0; i < s.value.length; i++) if (self._inView(s.stage[i])) values.push(s.value[i]);
    });
    var y = R.yAxis(values, this.logY);
    var axis = { zeroline: false, automargin: true, type: y.type, tickformat: y.tickformat, exponentformat: "e" };
    if (y.range) { axis.range = y.range; axis.autorange = false; } else axis.autorange = true;
    return axis;
  };

  Board.prototype._layout = function (name) {
    var series = this.metrics[name];
    var timeline = series.length ? series[0].timeline : null;
    var shapes = [], annotations = [];
    if (timeline && timeline.stages.length > 1) {
      timeline.bands(this.xMode).forEach(function (b) {
        shapes.push({ type: "rect", xref: "x", yref: "paper", x0: b.x0, x1: b.x1, y0: 0, y1: 1, layer: "below",
                      line: { width: 0 }, fillcolor: BAND_COLORS[b.index % BAND_COLORS.length] });
        annotations.push({ xref: "x", yref: "paper", x: b.x0, y: 1, text: escapeHtml(b.name),
                           showarrow: false, xanchor: "left", yanchor: "top", xshift: 3,
                           bgcolor: "rgba(255,255,255,0.8)", font: { size: 10, color: "#5b6472" } });
      });
    }
    var xTitle = AXIS_TITLES[this.xMode] + (this.xMode === "stage" && this.viewStage() ? " (" + this.viewStage() + ")" : "");
    return {
      title: { text: this._title(name), font: { size: 13 }, x: 0.02 },
      height: this.height, margin: { l: 50, r: 15, t: 35, b: 35 },
      xaxis: Object.assign({ title: { text: escapeHtml(xTitle), font: { size: 11 } },
               type: this.xMode === "wall" ? "date" : "linear", zeroline: false }, this._xticks(name)),
      yaxis: this._yaxis(name),
      showlegend: series.length > 1, legend: { orientation: "h", y: -0.25 },
      hovermode: "closest", shapes: shapes, annotations: annotations,
      paper_bgcolor: "#fff", plot_bgcolor: "#fff",
    };
  };

  Board.prototype._hasView = function (name) {
    var self = this;
    return this.metrics[name].some(function (s) { return s.stage.some(function (st) { return self._inView(st); }); });
  };

  Board.prototype._draw = function (name) {
    var chart = this.charts[name];
    if (!this._hasView(name)) { // nothing of the stage shown (an SFT loss in the GRPO stage)
      if (chart) chart.cell.hidden = true;
      return;
    }
    var home = this.pinned.has(name) ? "pinned" : groupOf(name);
    if (!chart) {
      var cell = document.createElement("div");
      cell.className = "chart-cell";
      var pin = document.createElement("button");
      pin.type = "button";
      pin.className = "pin";
      pin.dataset.metric = name;
      cell.appendChild(pin);
      var div = document.createElement("div");
      div.className = "chart";
      div.dataset.metric = name;
      cell.appendChild(div);
      var self = this;
      pin.addEventListener("click", function () { self.pin(name, !self.pinned.has(name)); });
      chart = this.charts[name] = { cell: cell, div: div, pin: pin, ema: {}, home: null };
      cell.dataset.metric = name;
      if (this._observer) this._observer.observe(cell);
    }
    if (chart.home !== home) { // new, or pinned / unpinned: into its section
      this._section(home).querySelector(".chart-grid").appendChild(chart.cell);
      chart.home = home;
    }
    chart.pin.textContent = this.pinned.has(name) ? "Unpin" : "Pin";
    chart.pin.setAttribute("aria-pressed", this.pinned.has(name) ? "true" : "false");
    chart.cell.hidden = false;
    chart.div.hidden = false;
    chart.stale = false;
    Plotly.react(chart.div, this._traces(name), this._layout(name),
                 { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["toImage"] });
  };

  // Pin a chart (on top of the page, in "Pinned"; remembered in this browser) or unpin it.
  Board.prototype.pin = function (name, on) {
    if (on) this.pinned.add(name); else this.pinned.delete(name);
    savePinned(PIN_KEY, this.pinned);
    if (this.charts[name]) this._draw(name);
    this._fixSections();
  };

  Board.prototype.render = function () {
    var self = this;
    this.names().forEach(function (name) {
      if (self.isShown(name)) self._draw(name);
      else if (self.charts[name]) self.charts[name].cell.hidden = true;
    });
    this._fixSections();
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
    var stagesBefore = this.stageNames().length;
    var shift = false;
    for (var j = 0; j < points.value.length; j++) {
      var st = points.stage ? points.stage[j] : "";
      var step = points.step[j], wt = points.wall_time[j];
      shift = s.timeline.observe(st, step, wt) || shift;
      s.step.push(step); s.wall_time.push(wt); s.value.push(points.value[j]); s.stage.push(st || "");
    }
    // a new stage: "stage" mode follows it (unless a stage was picked); the bands move
    if (this.stageNames().length !== stagesBefore) shift = true;
    var chart = this.charts[name];
    if (!this.isShown(name)) return isNew;
    if (!chart || newSeries || shift || !chart.div.data || chart.cell.hidden) {
      // a stage boundary moved the later stages' steps: redraw every chart on that time line
      if (shift) this.render(); else { this._draw(name); this._fixSections(); }
      return isNew;
    }
    // off screen: drawn whole when it comes into view (_onScreen)
    if (chart.onScreen === false) { chart.stale = true; return isNew; }
    var idx = -1;
    chart.div.data.forEach(function (t, k) { if (t.meta && t.meta.series === s.id && t.meta.kind === "raw") idx = k; });
    if (idx < 0) { this._draw(name); return isNew; }
    var pts = this._points(s, from);
    var shown = chart.div.data[idx].x.length + pts.x.length;
    // a series that just got enough points to smooth: drawn again, smoothed
    if (!chart.smoothed[s.id] && R.smoothingFor(shown, this.smoothing) > 0) { this._draw(name); return isNew; }
    if (pts.x.length) {
      var state = chart.ema[s.id];
      var smooth = pts.raw.map(function (v) { return state.push(v); });
      Plotly.extendTraces(chart.div, { x: [pts.x], y: [pts.raw] }, [idx]);
      Plotly.extendTraces(chart.div, { x: [pts.x.slice()], y: [smooth], customdata: [pts.custom] }, [idx + 1]);
      // the title's last value, the y format and range, the x ticks and the growing stage band
      var lay = this._layout(name);
      Plotly.relayout(chart.div, { "title.text": lay.title.text, "yaxis.tickformat": lay.yaxis.tickformat,
                                   "yaxis.autorange": lay.yaxis.autorange, "yaxis.range": lay.yaxis.range || null,
                                   "xaxis.dtick": lay.xaxis.dtick, "xaxis.tick0": lay.xaxis.tick0, shapes: lay.shapes, annotations: lay.annotations });
    }
    void self;
    return isNew;
  };

  Board.prototype._fixSections = function () {
    var self = this;
    Object.keys(this.sections).forEach(function (key) {
      self.sections[key].hidden = !self.sections[key].querySelector(".chart-cell:not([hidden])");
    });
  };

  Board.prototype.setSmoothing = function (w) { this.smoothing = Math.max(0, Math.min(0.999, +w)); this.render(); };
  Board.prototype.setXMode = function (mode) {
    if (!AXIS_TITLES[mode]) throw new Error("unknown x-axis mode " + mode);
    this.xMode = mode; this.render();
  };
  Board.prototype.setSelected = function (set) { this.selected = set; this.render(); };
  Board.prototype.setStage = function (stage) { this.stage = stage || null; this.render(); };
  Board.prototype.setLogY = function (on) { this.logY = !!on; this.render(); };

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

  // Wire the chart header's stage picker (shown in "stage" mode) and log-y box to a Board;
  // returns refresh(), to call when new stages may have appeared.
  function bindStageControls(board) {
    var box = document.getElementById("x-stage-box"), select = document.getElementById("x-stage");
    var mode = document.getElementById("x-mode"), logY = document.getElementById("log-y");
    function refresh() {
      var names = board.stageNames();
      box.hidden = mode.value !== "stage" || names.length < 2;
      var want = names.join("\u0000");
      if (select.dataset.names !== want) {
        select.dataset.names = want;
        select.innerHTML = names.map(function (n) {
          return '<option value="' + escapeHtml(n) + '">' + escapeHtml(n || "(no stage)") + "</option>";
        }).join("");
      }
      select.value = board.viewStage();
    }
    select.addEventListener("change", function () { board.setStage(select.value); refresh(); });
    mode.addEventListener("change", refresh);
    logY.addEventListener("change", function () { board.setLogY(logY.checked); });
    refresh();
    return refresh;
  }

  window.RFTCharts = {
    bindStageControls: bindStageControls,
    GROUPS: GROUPS, PALETTE: PALETTE, groupOf: groupOf, groupNames: groupNames,
    ema: ema, EmaState: EmaState, Timeline: Timeline, Board: Board, Picker: Picker,
    escapeHtml: escapeHtml,
  };
})();
