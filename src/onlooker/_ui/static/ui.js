// onlooker ui: live updates and the details panel. No dependencies, no build step.
// Every fragment swapped in here was rendered (and escaped) by the server.
(() => {
  "use strict";

  const state = document.getElementById("live-state");

  function showState(text, on) {
    if (!state) return;
    state.hidden = false;
    state.textContent = text;
    state.classList.toggle("off", !on);
  }

  function markSelected(root, key) {
    root.querySelectorAll(".row.selected").forEach((row) => row.classList.remove("selected"));
    if (!key) return;
    const item = root.querySelector(`[data-key="${CSS.escape(key)}"] > .row`);
    if (item) item.classList.add("selected");
  }

  // Replace a live region, keeping what the reader changed: closed children, the selected row.
  function swap(target, html) {
    const closed = [...target.querySelectorAll("details[id]:not([open])")].map((d) => d.id);
    const selected = target.querySelector(".row.selected");
    const key = selected ? selected.parentElement.dataset.key : null;
    target.innerHTML = html;
    closed.forEach((id) => {
      const details = document.getElementById(id);
      if (details) details.removeAttribute("open");
    });
    markSelected(target, key);
  }

  const live = document.querySelector("[data-stream]");
  if (live) {
    const source = new EventSource(live.dataset.stream);
    source.addEventListener("open", () => showState("● live", true));
    source.addEventListener("error", () => showState("○ reconnecting", false));
    source.addEventListener("update", (event) => swap(live, event.data));
    source.addEventListener("done", () => {
      source.close();
      showState("finished", false);
    });
    window.addEventListener("pagehide", () => source.close());
  }

  // Rows open their details in the side panel; a plain link when scripts are off.
  const panel = document.getElementById("detail");
  document.addEventListener("click", async (event) => {
    const link = event.target.closest(".timeline a.row");
    if (!link || !panel) return;
    if (event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    const key = link.parentElement.dataset.key;
    markSelected(document, key);
    panel.setAttribute("aria-busy", "true");
    try {
      const response = await fetch(`${link.href}&partial=1`, { headers: { accept: "text/html" } });
      panel.innerHTML = await response.text();
    } catch (error) {
      panel.textContent = `Could not load the details: ${error}`;
    } finally {
      panel.removeAttribute("aria-busy");
    }
  });
})();
