// Schedules: each one's calendar, its next occurrences in UTC and in its own zone, pause and
// resume; its occurrences' history is the search of its occurrences' keys.

import { call, readOnly } from "./api.js";
import { confirmAction, flash } from "./confirm.js";
import { el, replace, table, time } from "./dom.js";

const SHOWN = 3; // next occurrences shown per schedule

export async function schedulesPage(rerender) {
  const schedules = await everySchedule();
  const previews = await Promise.all(
    schedules.map((s) => call("GET", `${path(s)}/next?count=${SHOWN}`).then((p) => p.occurrences)),
  );
  const rows = schedules.map((s, i) =>
    el(
      "tr",
      { dataset: { application: s.application, schedule: s.schedule_id } },
      el("td", {}, s.application),
      el("td", {}, el("span", { class: "key" }, s.schedule_id)),
      el("td", { dataset: { field: "calendar" } }, s.cron !== null ? el("code", {}, s.cron) : `every ${s.every_s.toLocaleString("en-US")} s`),
      el("td", {}, s.timezone),
      el("td", { dataset: { field: "next" } }, nextOccurrences(s, previews[i])),
      el("td", { dataset: { field: "state" } }, s.paused ? "paused" : "active"),
      el(
        "td",
        {},
        el("a", { href: occurrencesHref(s) }, "Occurrences"),
        " ",
        el("button", { type: "button", class: "write", disabled: readOnly(), on: { click: () => toggle(s, rerender) } }, s.paused ? "Resume" : "Pause"),
      ),
    ),
  );
  return el(
    "div",
    { id: "schedules" },
    el("h1", {}, "Schedules"),
    el("p", { class: "muted" }, "Each occurrence rings as an alarm of its application, under the key ~schedule/<schedule>/<time in UTC>."),
    schedules.length
      ? table(["application", "schedule", "calendar", "time zone", "next occurrences", "state", ""], rows, { id: "schedule-table" })
      : el("p", { id: "no-schedules" }, "No schedules yet: PUT /v1/schedules/<application>/<schedule> makes one."),
  );
}

// Every schedule, page by page (a console shows a few hundred at most).
async function everySchedule() {
  const found = [];
  let cursor = null;
  for (let page = 0; page < 10; page += 1) {
    const query = cursor ? `?limit=500&cursor=${encodeURIComponent(cursor)}` : "?limit=500";
    const answer = await call("GET", `/v1/schedules${query}`);
    found.push(...answer.schedules);
    cursor = answer.next_cursor;
    if (!cursor) break;
  }
  return found;
}

function nextOccurrences(schedule, occurrences) {
  if (schedule.paused) return el("span", { class: "muted" }, "none while paused");
  if (!occurrences.length) return el("span", { class: "muted" }, "none: it has ended");
  return el(
    "ul",
    { class: "occurrences" },
    occurrences.map((o) => el("li", { title: o.local }, time(o.at), el("span", { class: "muted" }, ` (${o.local.slice(11, 16)} ${schedule.timezone})`))),
  );
}

function occurrencesHref(schedule) {
  const prefix = `~schedule/${schedule.schedule_id}/`;
  const params = new URLSearchParams({ application: schedule.application, business_id: prefix, mode: "prefix" });
  return `#search?${params}`;
}

function path(schedule) {
  return `/v1/schedules/${encodeURIComponent(schedule.application)}/${encodeURIComponent(schedule.schedule_id)}`;
}

async function toggle(schedule, rerender) {
  const action = schedule.paused ? "resume" : "pause";
  const what = schedule.paused
    ? `Resume ${schedule.schedule_id} of ${schedule.application}? It goes on from now: what fell due while it was paused does not ring.`
    : `Pause ${schedule.schedule_id} of ${schedule.application}? Its occurrences not yet due are deleted until it is resumed.`;
  if (!(await confirmAction(what))) return;
  try {
    await call("POST", `${path(schedule)}/${action}`);
    flash(`${schedule.paused ? "Resumed" : "Paused"} ${schedule.schedule_id} of ${schedule.application}.`);
    await rerender();
  } catch (error) {
    flash(error.message, true);
  }
}
