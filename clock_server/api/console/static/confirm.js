// Every action asks first, in a modal dialog that says what will change.

import { replace } from "./dom.js";

export function confirmAction(text, ...extra) {
  const dialog = document.getElementById("confirm");
  replace(document.getElementById("confirm-text"), text);
  replace(document.getElementById("confirm-extra"), ...extra);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// Show what an action did (or why it failed) above the page.
export function flash(message, isError = false) {
  const box = document.getElementById("flash");
  box.className = isError ? "flash error" : "flash";
  replace(box, message);
  box.hidden = false;
}

export function clearFlash() {
  const box = document.getElementById("flash");
  box.hidden = true;
  replace(box);
}
