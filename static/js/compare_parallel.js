// The compare page's parallel-coordinates chart (webapp/runs/compare_summary.py): one line per
// run across the numeric config paths that differ and the key metrics' last values, coloured by
// the last axis (a key metric) so the better runs stand out; a run without a value on an axis
// (null) is drawn at that axis's floor and named in the note below the chart.
(function () {
  "use strict";

  function draw(el, data) {
    var dims = data.dimensions;
    var gaps = [];
    var dimensions = dims.map(function (d) {
      var present = d.values.filter(function (v) { return v !== null; });
      var lo = Math.min.apply(null, present), hi = Math.max.apply(null, present);
      if (lo === hi) { lo -= 1; hi += 1; }
      d.values.forEach(function (v, i) { if (v === null) gaps.push(data.runs[i] + " has no " + d.label); });
      return {
        label: d.label.length > 28 ? "…" + d.label.slice(-27) : d.label,
        range: [lo, hi],
        values: d.values.map(function (v) { return v === null ? lo : v; }),
      };
    });
    var colour = dimensions[dimensions.length - 1].values;
    Plotly.newPlot(el, [{
      type: "parcoords",
      line: { color: colour, colorscale: "Viridis", showscale: true },
      dimensions: dimensions,
    }], { margin: { l: 60, r: 60, t: 60, b: 30 }, height: 360 }, { displaylogo: false, responsive: true });
    el.dataset.runs = data.runs.join("\n");
    if (gaps.length) {
      var note = document.createElement("p");
      note.className = "hint";
      note.textContent = "Not set (drawn at the floor): " + gaps.join("; ") + ".";
      el.parentNode.insertBefore(note, el.nextSibling);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var el = document.getElementById("parallel-coordinates");
    var source = document.getElementById("parallel-data");
    if (el && source && window.Plotly) draw(el, JSON.parse(source.textContent));
  });
})();
