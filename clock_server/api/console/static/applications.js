// Applications: each one's settings, limits and channel, its live counts, and a form to
// change them, the channel's own settings with it; a webhook application's secret is rotated
// beside the form. A field the server refuses shows its message beside it.

import { call, readOnly } from "./api.js";
import { clearFlash, confirmAction, flash } from "./confirm.js";
import { capped, el, numberProblem, replace, table } from "./dom.js";
import { secretSection } from "./webhook_secret.js";

const SETTINGS = [
  ["create_rate_per_s", "creates / s"],
  ["create_burst", "create burst"],
  ["max_pending", "max pending"],
  ["ring_rate_per_s", "rings / s"],
  ["ring_burst", "ring burst"],
  ["retry_base_s", "retry base (s)"],
  ["retry_cap_s", "retry cap (s)"],
  ["retry_max", "retries"],
  ["default_cutoff_ms", "default cutoff (ms)"],
  ["retention_days", "retention (days)"],
];
const CHANNELS = ["amqp", "webhook", "pull"];
// In the form only: the channel's own settings (the table shows the channel).
const CHANNEL_SETTINGS = [
  ["webhook_url", "webhook URL", "url"],
  ["webhook_timeout_s", "webhook timeout (s)", "number"],
  ["webhook_max_in_flight", "webhook calls at once", "number"],
  ["pull_visibility_s", "pull visibility (s)", "number"],
];
const EDITABLE = [...SETTINGS.map(([name]) => name), "channel", ...CHANNEL_SETTINGS.map(([name]) => name)];

export async function applicationsPage(rerender) {
  // Settings without exact counts (seconds over millions of alarms); the overview's capped
  // counts instead.
  const [{ applications }, overview] = await Promise.all([
    call("GET", "/v1/applications?counts=false"),
    call("GET", "/v1/overview"),
  ]);
  const counted = new Map(overview.by_application.map((a) => [a.application, a]));
  const count = (name, status) => {
    const found = counted.get(name);
    return el("td", { class: "num" }, found ? capped(found[status]) : "0");
  };
  const editor = el("div", { id: "editor" });
  const rows = applications.map((app) =>
    el(
      "tr",
      { dataset: { application: app.name } },
      el("td", {}, el("a", { href: `#search?application=${encodeURIComponent(app.name)}` }, app.name), app.registered ? "" : el("span", { class: "muted" }, " (not registered)")),
      count(app.name, "pending"),
      count(app.name, "dead"),
      SETTINGS.map(([name]) => el("td", { class: "num", dataset: { setting: name } }, app[name] === null ? "–" : String(app[name]))),
      el("td", { dataset: { setting: "channel" } }, app.channel),
      el(
        "td",
        {},
        el("button", { type: "button", class: "write", on: { click: () => replace(editor, form(app, rerender)) } }, "Edit"),
      ),
    ),
  );
  return el(
    "div",
    { id: "applications" },
    el("h1", {}, "Applications"),
    el("p", { class: "muted" }, "A dash is no limit, or the server's default. Changes reach every server within a few seconds."),
    table(["application", "pending", "dead", ...SETTINGS.map(([, label]) => label), "channel", ""], rows, { id: "application-table" }),
    editor,
  );
}

function form(app, rerender) {
  const shown = (name) => (app[name] === null || app[name] === undefined ? "" : String(app[name]));
  const locked = readOnly();
  const inputs = Object.fromEntries([
    ...SETTINGS.map(([name]) => [name, el("input", { name, type: "number", step: "any", min: "0", value: shown(name), disabled: locked })]),
    ["channel", el("select", { name: "channel", disabled: locked }, CHANNELS.map((c) => el("option", { value: c, selected: c === app.channel }, c)))],
    ...CHANNEL_SETTINGS.map(([name, , type]) => [name, type === "url" ? el("input", { name, type: "text", size: "40", value: shown(name), disabled: locked }) : el("input", { name, type, step: "any", min: "0", value: shown(name), disabled: locked })]),
  ]);
  // Beside each field, the server's message when it refused that field.
  const errors = Object.fromEntries(EDITABLE.map((name) => [name, el("span", { class: "error", dataset: { errorFor: name } })]));
  const field = (name, label) => el("label", {}, label, inputs[name], errors[name]);
  const value = (name) => {
    const raw = inputs[name].value.trim();
    if (name === "channel" || name === "webhook_url") return raw === "" ? null : raw;
    return raw === "" ? null : Number(raw);
  };
  const save = async (event) => {
    event.preventDefault();
    for (const box of Object.values(errors)) replace(box);
    // The browser's own check of min="0" would block the form without a word: say it here.
    const refused = EDITABLE.filter((name) => inputs[name].type === "number").map((name) => [name, numberProblem(name, inputs[name].value)]).filter(([, problem]) => problem);
    for (const [name, problem] of refused) replace(errors[name], problem);
    if (refused.length) {
      flash(`Not saved: ${refused[0][1]}`, true);
      return;
    }
    const changes = {};
    for (const name of EDITABLE) {
      const given = value(name);
      if (given !== (app[name] ?? null)) changes[name] = given;
    }
    if (!Object.keys(changes).length) {
      flash("Nothing changed.");
      return;
    }
    const listed = Object.entries(changes).map(([n, v]) => el("li", {}, `${n}: ${app[n] === null ? "–" : app[n]} → ${v === null ? "–" : v}`));
    const ok = await confirmAction(`Change these settings of ${app.name}?`, el("ul", {}, listed));
    if (!ok) return;
    try {
      const path = `/v1/applications/${encodeURIComponent(app.name)}?counts=false`;
      if (app.registered) await call("PATCH", path, changes);
      else await call("PUT", path, Object.fromEntries(EDITABLE.map((n) => [n, n in changes ? changes[n] : app[n]])));
      await rerender();
      flash(`Saved the settings of ${app.name}.`);
    } catch (error) {
      if (error.field && errors[error.field]) replace(errors[error.field], error.message);
      flash(`Not saved: ${error.message}${error.field ? ` (${error.field})` : ""}`, true);
    }
  };
  // Only the chosen channel's own settings are shown.
  const channelFields = Object.fromEntries(CHANNELS.map((c) => [c, el("div", { class: "channel-settings", dataset: { channel: c } }, CHANNEL_SETTINGS.filter(([name]) => name.startsWith(`${c}_`)).map(([name, label]) => field(name, label)))]));
  const showChannel = () => {
    for (const [c, box] of Object.entries(channelFields)) box.hidden = c !== inputs.channel.value;
  };
  inputs.channel.addEventListener("change", showChannel);
  showChannel();
  clearFlash();
  return el(
    "div",
    {},
    el(
      "form",
      { class: "filters", id: "edit-application", noValidate: true, on: { submit: save } },
      el("h2", {}, `Settings of ${app.name}`),
      SETTINGS.map(([name, label]) => field(name, label)),
      field("channel", "channel"),
      Object.values(channelFields),
      el("button", { type: "submit", class: "primary write", disabled: locked }, "Save"),
    ),
    app.registered && app.channel === "webhook" ? secretSection(app) : null,
  );
}
