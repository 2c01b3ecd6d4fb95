// Run page extras beside run_page.js (which stays the live protocol's): the job dir's size on
// disk under the checkpoint rows, and an opt-in browser notification when the run ends.
//
// - Disk: GET the #job-dir-disk element's data-url (/checkpoints/run/<id>/disk.json) on load and
//   after each checkpoint state run_page.js applies ("rft:checkpoint", at most every 5 s).
// - Notification: the "Notify me when it ends" box asks the browser's permission
//   (Notification API) and remembers the choice per run in localStorage; when run_page.js
//   applies a run state ("rft:run") that leaves the active statuses, one notification says how
//   the run ended and clicking it focuses the page.
(function () {
  "use strict";

  var root = document.getElementById("run-page");
  if (!root) return;
  var ACTIVE = { queued: 1, starting: 1, running: 1 };

  // ------------------------------------------------------------------ disk use
  var disk = document.getElementById("job-dir-disk");
  function fmtSize(n) {
    if (n === null || n === undefined) return "—";
    var units = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + units[i];
  }
  var diskTimer = null;
  function loadDisk() {
    diskTimer = null;
    fetch(disk.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) {
        if (!d) return;
        disk.dataset.totalBytes = d.total_bytes === null ? "" : String(d.total_bytes);
        disk.textContent = d.total_bytes === null ? "Job dir not on this host's disk." :
          "Job dir on disk: " + fmtSize(d.total_bytes) + " in all; " + d.checkpoints_on_disk +
          " checkpoint" + (d.checkpoints_on_disk === 1 ? "" : "s") + " on disk, " +
          fmtSize(d.checkpoint_bytes) + ".";
      })
      .catch(function () { /* the next checkpoint tries again */ });
  }
  if (disk && disk.dataset.url) {
    loadDisk();
    root.addEventListener("rft:checkpoint", function () {
      if (diskTimer === null) diskTimer = setTimeout(loadDisk, 5000);
    });
  }

  // ------------------------------------------------------------------ run-end notification
  var box = document.getElementById("notify-end");
  if (!box) return;
  var key = "rft:notify-end:" + root.dataset.runId;
  if (!("Notification" in window)) {
    box.disabled = true;
    box.parentNode.title = "this browser has no notifications";
    return;
  }
  box.checked = window.localStorage.getItem(key) === "1" && Notification.permission === "granted";
  box.addEventListener("change", function () {
    if (!box.checked) { window.localStorage.removeItem(key); return; }
    Notification.requestPermission().then(function (answer) {
      box.checked = answer === "granted";
      if (box.checked) window.localStorage.setItem(key, "1");
    });
  });
  root.addEventListener("rft:run", function (e) {
    var run = e.detail.run, prev = e.detail.prev;
    if (!box.checked || !prev || !ACTIVE[prev.status] || ACTIVE[run.status]) return;
    var title = document.title.split(" · ")[0];
    var note = new Notification(title + ": " + run.status, {
      body: run.exit_reason || ("The run is " + run.status + "."),
      tag: key,
    });
    note.onclick = function () { window.focus(); note.close(); };
    window.localStorage.removeItem(key);
    box.checked = false;
  });
})();
