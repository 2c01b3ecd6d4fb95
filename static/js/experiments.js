// Experiment pages, vanilla JS (no framework): the form/YAML tabs (kept in step through
// /experiments/form/convert/), the expert switch, conditional fields, list items (add, remove,
// reorder: renumbered on submit), YAML file upload, the run-compare picker and delete confirm.
(function () {
  "use strict";

  function csrf(form) {
    var input = form.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // ------------------------------------------------------------ conditional fields
  function fieldValue(form, name) {
    var el = form.querySelector('[name="' + name + '"]');
    return el ? el.value : "";
  }

  function effectiveFn(form, key) {
    var written = fieldValue(form, "algorithm." + key);
    if (written) return written;
    var presets = JSON.parse(form.dataset.presets || "{}");
    var type = fieldValue(form, "algorithm.algorithm_type") || "grpo";
    return (presets[type] || {})[key] || "";
  }

  function applyConditions(form) {
    form.querySelectorAll("[data-show-when]").forEach(function (el) {
      var rule = JSON.parse(el.dataset.showWhen);
      var show = Object.keys(rule).every(function (key) {
        var value = key.charAt(0) === "@" ? effectiveFn(form, key.slice(1)) : fieldValue(form, key);
        return rule[key].indexOf(value) >= 0;
      });
      el.hidden = !show;
    });
  }

  // ------------------------------------------------------------ lists
  function nextIndex(block) {
    var n = 0;
    block.querySelectorAll(".list-items > .list-item").forEach(function (item) {
      var i = parseInt(item.dataset.index, 10);
      if (!isNaN(i) && i >= n) n = i + 1;
    });
    return n;
  }

  function onListClick(event) {
    var target = event.target;
    var block = target.closest(".list-block");
    if (!block) return;
    var item = target.closest(".list-item");
    if (target.classList.contains("add-item")) {
      var tpl = block.querySelector(":scope > template.item-template");
      var index = nextIndex(block);
      // a stage's own empty taskset list keeps its "__j__" for its own add button
      var html = tpl.innerHTML.split(block.dataset.placeholder || "__i__").join(String(index));
      var holder = document.createElement("div");
      holder.innerHTML = html.trim();
      block.querySelector(":scope > .list-items").appendChild(holder.firstChild);
    } else if (target.classList.contains("remove-item") && item) {
      item.remove();
    } else if (target.classList.contains("move-up") && item && item.previousElementSibling) {
      item.parentNode.insertBefore(item, item.previousElementSibling);
    } else if (target.classList.contains("move-down") && item && item.nextElementSibling) {
      item.parentNode.insertBefore(item.nextElementSibling, item);
    }
  }

  // Items post as <list>[k] in page order, whatever index they were rendered with.
  function renumber(form) {
    form.querySelectorAll(".list-block").forEach(function (block) {
      var list = block.dataset.list;
      var items = block.querySelectorAll(":scope > .list-items > .list-item");
      items.forEach(function (item, k) {
        var old = list + "[" + item.dataset.index + "]";
        var now = list + "[" + k + "]";
        item.querySelectorAll("[name]").forEach(function (el) {
          if (el.name.indexOf(old) === 0) el.name = now + el.name.slice(old.length);
        });
        // lists inside the item (a stage's eval tasksets) and the items they clone follow it
        item.querySelectorAll(".list-block").forEach(function (inner) {
          if (inner.dataset.list.indexOf(old) === 0) inner.dataset.list = now + inner.dataset.list.slice(old.length);
          var tpl = inner.querySelector(":scope > template.item-template");
          if (tpl) tpl.innerHTML = tpl.innerHTML.split('"' + old).join('"' + now);
        });
        item.dataset.index = String(k);
      });
    });
  }

  // ------------------------------------------------------------ tabs
  function post(form, data) {
    data.append("csrfmiddlewaretoken", csrf(form));
    return fetch(form.dataset.convertUrl, {
      method: "POST", body: data, credentials: "same-origin",
      headers: { "X-CSRFToken": csrf(form) },
    }).then(function (r) { return r.json().then(function (body) { return { ok: r.ok, body: body }; }); });
  }

  function showTab(form, name) {
    form.dataset.tab = name;
    form.querySelectorAll("[data-tab-panel]").forEach(function (p) { p.hidden = p.dataset.tabPanel !== name; });
    form.querySelectorAll("[data-tab-target]").forEach(function (b) { b.classList.toggle("active", b.dataset.tabTarget === name); });
  }

  // A refused tab switch: every error with its path when the answer lists them (error_list).
  function tabError(form, message, list) {
    var box = form.querySelector(".tab-error");
    if (!box) {
      box = document.createElement("div");
      box.className = "errors tab-error";
      form.querySelector(".tabs").after(box);
    }
    box.textContent = "";
    if (list && list.length > 1) {
      var ul = document.createElement("ul");
      list.forEach(function (e) {
        var li = document.createElement("li");
        li.textContent = e.path ? e.path + ": " + e.message : e.message;
        ul.appendChild(li);
      });
      box.appendChild(ul);
    } else {
      box.textContent = message || "";
    }
    box.hidden = !message;
  }

  function switchTab(form, name) {
    if (name === form.dataset.tab) return;
    if (name === "yaml") {
      renumber(form);
      var data = new FormData(form);
      data.delete("config_file");
      data.append("to", "yaml");
      post(form, data).then(function (res) {
        if (!res.ok) { tabError(form, res.body.detail, res.body.error_list); return; }
        tabError(form, "");
        form.querySelector("#config-yaml").value = res.body.yaml;
        showTab(form, "yaml");
      });
    } else {
      var body = new FormData();
      body.append("to", "form");
      body.append("config_yaml", form.querySelector("#config-yaml").value);
      post(form, body).then(function (res) {
        if (!res.ok) { tabError(form, res.body.detail, res.body.error_list); return; }
        tabError(form, "");
        form.querySelector("#form-sections").innerHTML = res.body.html;
        applyConditions(form);
        showTab(form, "form");
      });
    }
  }

  function initForm(form) {
    showTab(form, form.dataset.tab || "form");
    form.querySelectorAll("[data-tab-target]").forEach(function (b) {
      b.addEventListener("click", function () { switchTab(form, b.dataset.tabTarget); });
    });
    var expert = form.querySelector("#expert-switch");
    expert.addEventListener("change", function () {
      form.classList.toggle("beginner", !expert.checked);
    });
    form.classList.toggle("beginner", !expert.checked);
    form.addEventListener("change", function () { applyConditions(form); });
    form.addEventListener("click", onListClick);
    form.addEventListener("submit", function () { renumber(form); });
    var file = form.querySelector("#config-file");
    file.addEventListener("change", function () {
      if (!file.files.length) return;
      var reader = new FileReader();
      reader.onload = function () { form.querySelector("#config-yaml").value = reader.result; file.value = ""; };
      reader.readAsText(file.files[0]);
    });
    applyConditions(form);
  }

  // ------------------------------------------------------------ detail page
  function initCompare(form) {
    form.addEventListener("submit", function (event) {
      var ids = Array.prototype.map.call(form.querySelectorAll(".compare-pick:checked"), function (c) { return c.value; });
      if (ids.length < 2) { event.preventDefault(); alert("Tick two or more runs to compare."); return; }
      form.querySelector("#compare-ids").value = ids.join(",");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var form = document.querySelector("form.experiment-form"); // an experiment's or a fork's
    if (form) initForm(form);
    var compare = document.getElementById("compare-form");
    if (compare) initCompare(compare);
    document.querySelectorAll("form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (event) { if (!confirm(f.dataset.confirm)) event.preventDefault(); });
    });
  });
})();
