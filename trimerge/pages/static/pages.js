// trimerge web view: the little behaviour pages have (the pages work without it).
"use strict";
document.addEventListener("input", function (event) {
  // Typing a value for a conflict chooses "value" for that cell.
  var box = event.target;
  if (!box.classList || !box.classList.contains("typed")) { return; }
  var label = box.closest("label");
  var radio = label ? label.querySelector("input[type=radio]") : null;
  if (radio) { radio.checked = true; }
});
document.addEventListener("submit", function (event) {
  // A merge is not undone by a click: ask once.
  var button = event.submitter;
  if (button && button.value === "merge" && !window.confirm("Merge this request now?")) { event.preventDefault(); }
});
