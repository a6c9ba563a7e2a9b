// An application's webhook secret: rotated here, never read. The new secret is shown once,
// in the page only, and the one it replaces goes on signing beside it for the overlap the
// operator chose (POST /v1/applications/<name>/webhook-secret), so receivers can move over.

import { call, readOnly } from "./api.js";
import { confirmAction, flash } from "./confirm.js";
import { el, numberProblem, replace, time } from "./dom.js";

const OVERLAP_DEFAULT_S = 86400; // the API's own default: a day
const OVERLAP_MAX_S = 7 * 86400;

export function secretSection(app) {
  const overlap = el("input", { name: "overlap_s", type: "number", step: "any", min: "0", max: String(OVERLAP_MAX_S), value: String(OVERLAP_DEFAULT_S), disabled: readOnly() });
  const overlapError = el("span", { class: "error", dataset: { errorFor: "overlap_s" } });
  const shown = el("div", { id: "new-secret" });
  const rotate = async () => {
    replace(overlapError);
    const raw = overlap.value.trim();
    const problem = numberProblem("overlap_s", raw);
    if (problem) {
      replace(overlapError, problem);
      return;
    }
    const overlapS = raw === "" ? OVERLAP_DEFAULT_S : Number(raw);
    const ok = await confirmAction(
      `Rotate the webhook secret of ${app.name}?`,
      el("p", {}, `The current secret goes on signing beside the new one for ${overlapS} s; receivers must take the new one within that time.`),
    );
    if (!ok) return;
    try {
      const rotated = await call("POST", `/v1/applications/${encodeURIComponent(app.name)}/webhook-secret`, { overlap_s: overlapS });
      replace(shown, ...revealed(rotated));
      flash(`Rotated the webhook secret of ${app.name}.`);
    } catch (error) {
      if (error.field === "overlap_s") replace(overlapError, error.message);
      flash(`Not rotated: ${error.message}`, true);
    }
  };
  return el(
    "section",
    { id: "webhook-secret", class: "filters" },
    el("h2", {}, `Webhook secret of ${app.name}`),
    el("p", { class: "muted" }, app.webhook_secret_set ? "A secret signs its webhooks; it is not shown again." : "No secret yet: one is made when it first takes the webhook channel."),
    el("label", {}, "old secret signs on for (s)", overlap, overlapError),
    el("button", { type: "button", id: "rotate-secret", class: "danger write", disabled: readOnly(), on: { click: rotate } }, "Rotate secret"),
    shown,
  );
}

function revealed(rotated) {
  const until = rotated.previous_secret_signs_until;
  return [
    el("p", {}, "The new secret, shown only now: give it to the receiver."),
    el("code", { id: "new-secret-value", class: "key" }, rotated.webhook_secret),
    el("p", { id: "previous-secret-until", class: "muted" }, until === null ? "The previous secret no longer signs." : `The previous secret signs beside it until ${time(until)}.`),
  ];
}
