// The rules a metric chart follows so that a practitioner can trust it (window.RFTChartRules),
// pure functions used by static/js/charts.js and tested in the browser
// (tests/e2e/test_chart_rules.py):
//
// - smoothingFor(n, weight): a series smooths only with MIN_SMOOTH_POINTS points or more (a
//   4-point eval series drawn smoothed would end far from its last value).
// - yAxis(values, log): the y axis for the finite values: a tick format with as many decimals
//   as the range needs (never "-0.0875000000000000435"), and a flat series gets an explicit
//   range around its value (drawn flat in the middle, not blown up by float noise). On a log
//   axis only positive values count.
// - lastValue(values, steps): the last raw value and its step (shown in the chart's title, so
//   smoothing never hides where a series is now).
// - fmtValue(v): a value for hover text and titles (4 significant digits).
(function () {
  "use strict";

  var MIN_SMOOTH_POINTS = 10;

  function smoothingFor(n, weight) {
    return n >= MIN_SMOOTH_POINTS ? weight : 0;
  }

  function finite(values, positiveOnly) {
    var out = [];
    for (var i = 0; i < values.length; i++) {
      var v = values[i];
      if (v !== null && v !== undefined && isFinite(v) && (!positiveOnly || v > 0)) out.push(+v);
    }
    return out;
  }

  // Decimals for ticks about span/6 apart (Plotly's own steps are 1, 2, 2.5 or 5 x 10^k: one
  // more decimal than the step's magnitude shows a 2.5 step exactly).
  function decimalsFor(span) {
    var step = span / 6;
    return Math.max(0, Math.min(10, -Math.floor(Math.log10(step)) + 1));
  }

  function tickFormat(lo, hi) {
    var scale = Math.max(Math.abs(lo), Math.abs(hi));
    var span = hi - lo;
    if (scale >= 1e6 || (scale > 0 && scale < 1e-3)) return ".3~e";
    if (!(span > 0)) return ".4~g";
    return "." + decimalsFor(span) + "~f";
  }

  // {tickformat, range?, type, flat}: what the y axis of these values needs.
  function yAxis(values, log) {
    var xs = finite(values, !!log);
    if (log) return { type: "log", tickformat: "", flat: false };
    if (!xs.length) return { type: "linear", tickformat: ".4~g", flat: false };
    var lo = Math.min.apply(null, xs), hi = Math.max.apply(null, xs);
    var scale = Math.max(Math.abs(lo), Math.abs(hi));
    // flat: equal up to float noise (1e-9 of the value's size)
    if (hi - lo <= 1e-9 * Math.max(scale, 1e-12)) {
      var mid = (lo + hi) / 2;
      var pad = scale > 0 ? scale * 0.05 : 1;
      return { type: "linear", range: [mid - pad, mid + pad], tickformat: tickFormat(mid - pad, mid + pad), flat: true };
    }
    return { type: "linear", tickformat: tickFormat(lo, hi), flat: false };
  }

  function lastValue(values, steps) {
    for (var i = values.length - 1; i >= 0; i--) {
      var v = values[i];
      if (v !== null && v !== undefined && isFinite(v)) return { value: +v, step: steps ? steps[i] : null };
    }
    return null;
  }

  function fmtValue(v) {
    if (v === null || v === undefined || !isFinite(v)) return "—";
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e");
    return String(Number(v.toPrecision(4)));
  }

  window.RFTChartRules = {
    MIN_SMOOTH_POINTS: MIN_SMOOTH_POINTS, smoothingFor: smoothingFor, yAxis: yAxis,
    tickFormat: tickFormat, lastValue: lastValue, fmtValue: fmtValue,
  };
})();
