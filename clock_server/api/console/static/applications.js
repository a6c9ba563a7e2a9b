// Applications: each one's settings and limits, its live counts, and a form to change them.

import { call, readOnly } from "./api.js";
import { clearFlash, confirmAction, flash } from "./confirm.js";
import { capped, el, replace, table } from "./dom.js";

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
    table(["application", "pending", "dead", ...SETTINGS.map(([, label]) => label), ""], rows, { id: "application-table" }),
    editor,
  );
}

function form(app, rerender) {
  const inputs = Object.fromEntries(
    SETTINGS.map(([name]) => [name, el("input", { name, type: "number", step: "any", min: "0", value: app[name] === null ? "" : String(app[name]) })]),
  );
  const save = async (event) => {
    event.preventDefault();
    const changes = {};
    for (const [name] of SETTINGS) {
      const raw = inputs[name].value.trim();
      const value = raw === "" ? null : Number(raw);
      if (value !== app[name]) changes[name] = value;
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
      else await call("PUT", path, Object.fromEntries(SETTINGS.map(([n]) => [n, n in changes ? changes[n] : app[n]])));
      await rerender();
      flash(`Saved the settings of ${app.name}.`);
    } catch (error) {
      flash(`Not saved: ${error.message}${error.field ? ` (${error.field})` : ""}`, true);
    }
  };
  clearFlash();
  return el(
    "form",
    { class: "filters", id: "edit-application", on: { submit: save } },
    el("h2", {}, `Settings of ${app.name}`),
    SETTINGS.map(([name, label]) => el("label", {}, label, inputs[name])),
    el("button", { type: "submit", class: "primary write", disabled: readOnly() }, "Save"),
  );
}
