// The console's own script: copy buttons. (htmx does the live parts; nothing here is inline, per the CSP.)
"use strict";
document.addEventListener("click", async (event) => {
  const button = event.target.closest("button.copy[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.dataset.copy);
  if (!source) return;
  const text = "value" in source ? source.value : source.textContent;
  try {
    await navigator.clipboard.writeText(text);
  } catch (_error) {
    // No clipboard API (plain http on a non-loopback host): select the text so Ctrl-C copies it.
    if (source.select) { source.select(); } else { window.getSelection().selectAllChildren(source); }
    document.execCommand && document.execCommand("copy");
  }
  const label = button.textContent;
  button.textContent = "Copied";
  setTimeout(() => { button.textContent = label; }, 1500);
});
// A bare-form signed-in page keeps working without JS; htmx adds the in-place refreshes on top.
document.addEventListener("htmx:responseError", (event) => {
  const target = document.getElementById("live-error");
  if (target) target.textContent = "The live view could not refresh (HTTP " + event.detail.xhr.status + "); retrying.";
});
// A destructive button says so before its form is sent: <button data-confirm="Stop this workflow?">.
document.addEventListener("submit", (event) => {
  const button = event.submitter && event.submitter.closest("[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});
