// /runs/: choosing a status, tag or experiment applies the filters at once (the form's
// Apply button does the same without JavaScript).
(function () {
  "use strict";
  var form = document.getElementById("runs-filters");
  if (!form) return;
  form.querySelectorAll("select").forEach(function (select) {
    select.addEventListener("change", function () { form.submit(); });
  });
})();
