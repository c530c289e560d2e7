// The console's small helpers: copy buttons (hidden without JavaScript, where they cannot work).
(function () {
  "use strict";
  function wire(root) {
    for (const button of root.querySelectorAll("button.copy[data-copy]")) {
      if (button.dataset.wired) continue;
      button.dataset.wired = "1";
      button.hidden = false;
      button.addEventListener("click", async function () {
        try {
          await navigator.clipboard.writeText(button.dataset.copy);
          button.textContent = "Copied";
        } catch (err) {
          button.textContent = "Copy failed";
        }
      });
    }
  }
  wire(document);
  document.addEventListener("htmx:afterSwap", function (event) { wire(event.target); });
})();
