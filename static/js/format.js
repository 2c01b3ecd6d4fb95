// Number formatting the run pages share (run_page.js's sample cards, rollouts.js's explorer).
(function () {
  "use strict";
  window.RFTFormat = {
    // a finite number with `digits` decimals (3 by default); anything else: an em dash
    num: function (v, digits) {
      return typeof v === "number" && isFinite(v) ? v.toFixed(digits === undefined ? 3 : digits) : "—";
    },
  };
})();
