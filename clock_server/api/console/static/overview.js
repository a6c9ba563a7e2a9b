// Overview: health, the last hour in charts, counts by status and by application, alarms
// due soon, and lateness; read again every few seconds until paused.

import { call, stats } from "./api.js";
import { capped, cell, duration, el, replace, table, time, timeCell } from "./dom.js";
import { Refresher } from "./refresh.js";
import { chartForm, statsCharts } from "./stats_charts.js";

const STATUSES = ["pending", "delivering", "rung", "cancelled", "expired", "dead"];
const REFRESH_MS = 5000;
const STATS_MINUTES = 60;

// params: "chart", an application to chart beside those the statistics chart by themselves.
export async function overviewPage(params = new URLSearchParams(), navigate = () => {}) {
  const chart = params.get("chart");
  const body = el("div", { id: "overview-body" });
  const state = el("span", { id: "refresh-state", class: "muted", role: "status" });
  const toggle = el("button", { type: "button", id: "refresh-toggle", "aria-pressed": "false" }, "Pause");
  const root = el("div", { id: "overview" }, el("h1", {}, "Overview"), el("div", { class: "actions", id: "refresh" }, toggle, state), chartForm(chart, navigate), body);
  const refresher = new Refresher(root, REFRESH_MS, () => read(body, chart), (now) => {
    replace(toggle, now.paused ? "Resume" : "Pause");
    toggle.setAttribute("aria-pressed", String(now.paused));
    root.dataset.refreshing = now.paused ? "paused" : "on";
    replace(state, stateText(now));
  });
  toggle.addEventListener("click", () => refresher.toggle());
  (await read(body, chart))();
  refresher.start();
  refresher.report();
  return root;
}

function stateText({ paused, lastAt, error }) {
  const read = `read at ${time(lastAt).slice(11, 19)} UTC`;
  if (error) return `Could not read again (${error.message}); showing what was ${read}.`;
  return paused ? `Paused; ${read}.` : `Every ${REFRESH_MS / 1000} s while this tab is shown; ${read}.`;
}

// Both readings, then a function that shows them.
async function read(body, chart) {
  const [data, last] = await Promise.all([call("GET", "/v1/overview"), lastHour(chart)]);
  return () => replace(body, sections(data, last));
}

// The statistics of the last hour, with `chart`'s series too when they left it out.
async function lastHour(chart) {
  try {
    const all = await stats(STATS_MINUTES);
    if (!chart || all.series[chart]) return { ...all, asked: chart };
    const one = await stats(STATS_MINUTES, chart).catch((error) => ({ error }));
    if (one.error) return { ...all, asked: chart, askedError: one.error };
    return { ...all, asked: chart, applications: [...all.applications, chart], series: { ...all.series, [chart]: one.series[chart] } };
  } catch (error) {
    return { error };
  }
}

function sections(data, last) {
  const h = data.health;
  const late = data.lateness;
  return [
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
          ["engine", "started", "last heartbeat", "beating", "slots", "share"],
          h.engines.map((e) =>
            el(
              "tr",
              {},
              cell(e.instance_id),
              timeCell(e.started_at),
              timeCell(e.heartbeat_at),
              cell(e.beating ? "yes" : "no"),
              cell(e.slot_to > e.slot_from ? `${e.slot_from}-${e.slot_to - 1}` : "none"),
              cell(`${(e.share * 100).toFixed(1)} %`),
            ),
          ),
          { id: "engines" },
        )
      : el("p", { class: "muted" }, "No engine is registered."),
    el("h2", {}, "The last hour"),
    statsCharts(last),
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
    el("h2", {}, `Lateness of rings (last ${duration(late.window_ms)})`),
    el("p", { class: "muted" }, "The engine's, from the per-minute statistics: from the due time to the publish of a message the broker confirmed, the start of the webhook call answered 2xx, or the pull hand-off."),
    lateness(late, "lateness", "", "rings counted", "highest bucket"),
    el("h2", { id: "pull-ack-title" }, pullTitle(data.pull_ack)),
    el("p", { class: "muted" }, "The pull consumers': from the due time to their ack, read from the alarms acked last."),
    lateness(data.pull_ack, "pull-ack", "pull-", "acks read", "max"),
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
  ];
}

function pullTitle(ack) {
  return ack ? `Pull consumers' time to ack (last ${duration(ack.window_ms)})` : "Pull consumers' time to ack";
}

function lateness(late, id, prefix, sampleLabel, maxLabel) {
  const known = late || { sample: 0, p50_ms: null, p99_ms: null, max_ms: null };
  // Past the last bucket's bound the statistics know only that a ring was later still.
  const shown = (ms) => (known.over_max && ms !== null && ms >= known.max_ms ? `over ${duration(known.max_ms)}` : duration(ms));
  return el(
    "div",
    { class: "cards", id },
    card("p50", shown(known.p50_ms), `${prefix}p50`),
    card("p99", shown(known.p99_ms), `${prefix}p99`),
    card(maxLabel, shown(known.max_ms), `${prefix}max`),
    card(sampleLabel, late ? known.sample.toLocaleString("en-US") : "–", `${prefix}sample`),
  );
}

function card(label, value, id) {
  return el("div", { class: "card", id: `card-${id}` }, el("div", { class: "label" }, label), el("div", { class: "value" }, value));
}
