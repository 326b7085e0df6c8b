// toolgate console: refreshes the live state and previews the arguments.
// Every page works without it.
"use strict";

// Every two seconds, the element with data-refresh is replaced by the
// same element of a fresh copy of its page, while the tab is visible.
function refreshLive() {
  const live = document.querySelector("[data-refresh]");
  if (!live) {
    return;
  }
  setInterval(async () => {
    if (document.hidden) {
      return;
    }
    try {
      const resp = await fetch(live.dataset.refresh, { credentials: "same-origin", cache: "no-store" });
      if (!resp.ok) {
        return;
      }
      const doc = new DOMParser().parseFromString(await resp.text(), "text/html");
      const fresh = doc.getElementById(live.id);
      const current = document.getElementById(live.id);
      if (fresh && current) {
        current.replaceWith(fresh);
      }
    } catch (e) {
      // The next round tries again.
    }
  }, 2000);
}

// The arguments the fields make, as the server builds them (form.go),
// shown in the raw JSON box's placeholder.
function previewArgs() {
  const raw = document.getElementById("args-json");
  const form = document.getElementById("playground");
  if (!raw || !form) {
    return;
  }
  const update = () => {
    const args = {};
    for (const el of form.querySelectorAll("[data-kind]")) {
      const value = el.value.trim();
      if (value === "") {
        continue;
      }
      const name = el.name.slice("arg.".length);
      if (el.dataset.kind === "text") {
        args[name] = el.value;
        continue;
      }
      try {
        args[name] = JSON.parse(value);
      } catch (e) {
        args[name] = value;
      }
    }
    raw.placeholder = JSON.stringify(args);
  };
  form.addEventListener("input", update);
  update();
}

document.addEventListener("DOMContentLoaded", () => {
  refreshLive();
  previewArgs();
});
