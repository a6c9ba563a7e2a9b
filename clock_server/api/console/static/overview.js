// Overview: health, counts by status and by application, alarms due soon, recent lateness.

import { call } from "./api.js";
import { capped, cell, duration, el, table, timeCell } from "./dom.js";

const STATUSES = ["pending", "delivering", "rung", "cancelled", "expired", "dead"];

export async function overviewPage() {
  const data = await call("GET", "/v1/overview");
  const h = data.health;
  const late = data.lateness;
  return el(
    "div",
    { id: "overview" },
    el("h1", {}, "Overview"),
    el("h2", {}, "Health"),
    el(
      "div",
      { class: "cards", id: "health" },
      card("Database", el("span", { class: h.database }, h.database), "database"),
      card("Broker", el("span", { class: h.broker }, h.broker), "broker"),
      card("Live engines", h.live_engines === null ? "–" : String(h.live_engines), "live-engines"),
    ),
    h.engines.length
      ? table(
          ["engine", "started", "last heartbeat", "beating"],
          h.engines.map((e) =>
            el("tr", {}, cell(e.instance_id), timeCell(e.started_at), timeCell(e.heartbeat_at), cell(e.beating ? "yes" : "no")),
          ),
          { id: "engines" },
        )
      : el("p", { class: "muted" }, "No engine is registered."),
    el("h2", {}, "Alarms by status"),
    el(
      "div",
      { class: "cards", id: "by-status" },
      STATUSES.map((s) => card(s, el("a", { href: `#search?status=${s}` }, capped(data.by_status[s])), `status-${s}`)),
    ),
    el("h2", {}, "Due soon"),
    el(
      "div",
      { class: "cards", id: "due" },
      card("Overdue", capped(data.overdue), "overdue"),
      data.due.map((d) => card(`Due within ${duration(d.within_ms)}`, capped(d), `due-${d.within_ms}`)),
    ),
    el("h2", {}, `Lateness of the latest rings (last ${duration(late.window_ms)})`),
    el(
      "div",
      { class: "cards", id: "lateness" },
      card("p50", duration(late.p50_ms), "p50"),
      card("p99", duration(late.p99_ms), "p99"),
      card("max", duration(late.max_ms), "max"),
      card("rings read", late.sample.toLocaleString("en-US"), "sample"),
    ),
    el("h2", {}, "By application"),
    table(
      ["application", "pending", "dead"],
      data.by_application.map((a) =>
        el(
          "tr",
          { dataset: { application: a.application } },
          cell(el("a", { href: `#search?application=${encodeURIComponent(a.application)}` }, a.application)),
          el("td", { class: "num" }, capped(a.pending)),
          el("td", { class: "num" }, capped(a.dead)),
        ),
      ),
      { id: "by-application" },
    ),
    el(
      "p",
      { class: "muted" },
      `Counts stop at ${data.count_cap.toLocaleString("en-US")} (per application at ${data.application_count_cap.toLocaleString("en-US")}) and then read "≥": an exact count of millions of rows would take seconds. As of `,
      timeCell(data.now).textContent,
      ".",
    ),
  );
}

function card(label, value, id) {
  return el("div", { class: "card", id: `card-${id}` }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}
