// Search: by application, business_id (exact or prefix), status and due-time range, in keyset
// pages; and the bulk actions on everything the filter matches.

import { ApiError, alarmPath, call, query, readOnly, setReadOnly } from "./api.js";
import { confirmAction, flash } from "./confirm.js";
import { alarmLink, cell, el, parseUtc, table, timeCell, utcInput } from "./dom.js";

const STATUSES = ["pending", "delivering", "rung", "cancelled", "expired", "dead"];
const PAGE = 50;
let pages = { filter: null, cursors: [null] }; // the cursors of the pages seen, for "Previous"

export async function searchPage(params, navigate) {
  const filter = Object.fromEntries(["application", "business_id", "mode", "status", "due_from", "due_to"].map((n) => [n, params.get(n) || ""]));
  const key = JSON.stringify(filter);
  if (pages.filter !== key) pages = { filter: key, cursors: [null] };
  const form = filterForm(filter, navigate);
  const results = el("div", { id: "results" });
  const searched = Object.values(filter).some((v) => v && v !== "exact" && v !== "prefix");
  if (searched) await show(results, filter, navigate);
  else results.append(el("p", { class: "muted" }, "Choose a filter. A business id needs its application."));
  return el("div", { id: "search" }, el("h1", {}, "Search"), form, results);
}

function filterForm(filter, navigate) {
  const field = (name, attrs = {}) => el("input", { name, value: filter[name], ...attrs });
  const inputs = {
    application: field("application", { placeholder: "orders", size: 14 }),
    business_id: field("business_id", { size: 22, dir: "auto" }),
    mode: el("select", { name: "mode" }, ["exact", "prefix"].map((m) => el("option", { value: m, selected: filter.mode === m }, m))),
    status: el("select", { name: "status" }, el("option", { value: "" }, "any"), STATUSES.map((s) => el("option", { value: s, selected: filter.status === s }, s))),
    due_from: el("input", { name: "due_from", type: "datetime-local", step: "1", value: filter.due_from ? utcInput(Number(filter.due_from)) : "" }),
    due_to: el("input", { name: "due_to", type: "datetime-local", step: "1", value: filter.due_to ? utcInput(Number(filter.due_to)) : "" }),
  };
  const submit = (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const name of ["application", "business_id", "mode", "status"]) {
      if (inputs[name].value.trim()) next.set(name, inputs[name].value.trim());
    }
    for (const name of ["due_from", "due_to"]) {
      const ms = parseUtc(inputs[name].value);
      if (ms !== null) next.set(name, String(ms));
    }
    pages = { filter: null, cursors: [null] };
    navigate(`#search?${next.toString()}`);
  };
  return el(
    "form",
    { class: "filters", id: "search-form", on: { submit } },
    el("label", {}, "application", inputs.application),
    el("label", {}, "business id", inputs.business_id),
    el("label", {}, "match", inputs.mode),
    el("label", {}, "status", inputs.status),
    el("label", {}, "due from (UTC)", inputs.due_from),
    el("label", {}, "due before (UTC)", inputs.due_to),
    el("button", { type: "submit", class: "primary" }, "Search"),
  );
}

async function show(results, filter, navigate) {
  if (filter.business_id && filter.mode !== "prefix") {
    await showExact(results, filter);
    return;
  }
  const cursor = pages.cursors[pages.cursors.length - 1];
  const page = await call("GET", `/v1/alarms${query({ ...apiFilter(filter), limit: PAGE, cursor })}`);
  const rerun = () => show(results, filter, navigate);
  const previous = el("button", { type: "button", id: "previous-page", disabled: pages.cursors.length < 2, on: { click: () => { pages.cursors.pop(); rerun(); } } }, "Previous page");
  const next = el("button", { type: "button", id: "next-page", disabled: !page.next_cursor, on: { click: () => { pages.cursors.push(page.next_cursor); rerun(); } } }, "Next page");
  results.replaceChildren(
    el("p", { class: "muted", id: "page-info" }, `Page ${pages.cursors.length}: ${page.alarms.length} alarm${page.alarms.length === 1 ? "" : "s"}.`),
    alarmTable(page.alarms),
    el("div", { class: "actions" }, previous, next),
    bulkActions(filter, rerun),
  );
}

async function showExact(results, filter) {
  if (!filter.application) {
    results.replaceChildren(el("p", { class: "error" }, "A business id needs its application."));
    return;
  }
  try {
    const alarm = await call("GET", alarmPath(filter.application, filter.business_id));
    results.replaceChildren(alarmTable([alarm]));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    results.replaceChildren(el("p", { id: "page-info" }, "No such alarm."));
  }
}

function apiFilter(filter) {
  return {
    application: filter.application,
    status: filter.status,
    business_id_prefix: filter.mode === "prefix" ? filter.business_id : "",
    due_from: filter.due_from,
    due_to: filter.due_to,
  };
}

export function alarmTable(alarms) {
  return table(
    ["application", "business id", "status", "target", "next try / finished", "retries", "created"],
    alarms.map((a) =>
      el("tr", { dataset: { id: String(a.id) } }, cell(a.application), cell(alarmLink(a.application, a.business_id)), cell(a.status), timeCell(a.target_ring_at), timeCell(a.next_try_time), el("td", { class: "num" }, String(a.retry_times)), timeCell(a.created_at)),
    ),
    { id: "alarm-table" },
  );
}

function bulkActions(filter, rerun) {
  const body = Object.fromEntries(Object.entries(apiFilter(filter)).filter(([, v]) => v !== "").map(([k, v]) => [k, k.startsWith("due_") ? Number(v) : v]));
  const described = Object.entries(body).map(([k, v]) => el("li", {}, `${k}: `, el("span", { class: "key", dir: "auto" }, String(v))));
  const run = (verb, path) => async () => {
    const ok = await confirmAction(`${verb} every alarm matching this filter? This cannot be undone.`, el("ul", {}, described.length ? described : el("li", {}, "no filter: every alarm")));
    if (!ok) return;
    try {
      let changed = 0;
      for (let round = 0; round < 100; round += 1) {
        const outcome = await call("POST", path, body);
        changed += outcome.changed;
        if (outcome.done !== false) break;
      }
      flash(`${verb}: ${changed.toLocaleString("en-US")} alarm${changed === 1 ? "" : "s"} changed.`);
      await rerun();
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) setReadOnly(true);
      flash(`${verb} failed: ${error.message}`, true);
    }
  };
  const disabled = readOnly();
  return el(
    "div",
    { class: "actions", id: "bulk" },
    el("button", { type: "button", class: "write", id: "bulk-redrive", disabled, on: { click: run("Re-drive", "/v1/alarms/redrive") } }, "Re-drive all matching"),
    el("button", { type: "button", class: "danger write", id: "bulk-cancel", disabled, on: { click: run("Cancel", "/v1/alarms/cancel") } }, "Cancel all matching"),
  );
}
