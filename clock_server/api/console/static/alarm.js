// Alarm detail: every field, the payload as text, the whole history, and the actions its
// status allows: cancel and reschedule a pending alarm, re-drive a dead or expired one.

import { ApiError, alarmPath, call, readOnly, setReadOnly } from "./api.js";
import { confirmAction, flash } from "./confirm.js";
import { cell, el, key, parseUtc, table, time, timeCell, utcInput } from "./dom.js";

const TIMES = ["target_ring_at", "latest_ring_at", "next_try_time", "rung_at", "created_at", "updated_at"];

export async function alarmPage(application, businessId, rerender) {
  const [alarm, history] = await Promise.all([
    call("GET", alarmPath(application, businessId)),
    call("GET", alarmPath(application, businessId, "/events")),
  ]);
  const fields = Object.entries(alarm).filter(([name]) => name !== "payload");
  return el(
    "div",
    { id: "alarm" },
    el("h1", {}, "Alarm ", key(alarm.business_id), el("span", { class: "muted" }, ` of ${alarm.application}`)),
    actions(alarm, rerender),
    table(
      ["field", "value"],
      fields.map(([name, value]) =>
        el("tr", { dataset: { field: name } }, cell(name), TIMES.includes(name) ? timeCell(value) : cell(value === null ? "–" : el("span", { class: "key", dir: "auto" }, String(value)))),
      ),
      { id: "fields" },
    ),
    el("h2", {}, "Payload"),
    el("pre", { class: "payload", id: "payload", dir: "auto" }, alarm.payload),
    el("h2", {}, "History"),
    table(
      ["at", "event", "by", "detail"],
      history.events.map((e) => el("tr", { dataset: { kind: e.kind } }, timeCell(e.at), cell(e.kind), cell(e.actor), cell(describe(e)))),
      { id: "history" },
    ),
  );
}

function describe(event) {
  const d = event.detail || {};
  const parts = [];
  if (d.from !== undefined && d.to !== undefined) parts.push(`from ${time(d.from)} to ${time(d.to)}`);
  if (d.target_ring_at !== undefined) parts.push(`due ${time(d.target_ring_at)}`);
  if (d.latest_ring_at) parts.push(`cutoff ${time(d.latest_ring_at)}`);
  if (d.attempt !== undefined) parts.push(`attempt ${d.attempt}`);
  if (d.error) parts.push(`error: ${d.error}`);
  if (d.retry_at) parts.push(`retry at ${time(d.retry_at)}`);
  if (d.attempts !== undefined) parts.push(`after ${d.attempts} attempts`);
  if (d.from_status) parts.push(`was ${d.from_status}`);
  if (d.due_at !== undefined) parts.push(`due ${time(d.due_at)}`);
  if (d.ring_after_count !== undefined) parts.push(`count ${d.count} of ${d.ring_after_count}`);
  const known = new Set(["from", "to", "target_ring_at", "latest_ring_at", "attempt", "error", "retry_at", "attempts", "from_status", "due_at", "count", "ring_after_count"]);
  const rest = Object.fromEntries(Object.entries(d).filter(([k]) => !known.has(k)));
  if (Object.keys(rest).length) parts.push(JSON.stringify(rest));
  return parts.join("; ");
}

function actions(alarm, rerender) {
  const disabled = readOnly();
  const when = el("input", { id: "when", type: "datetime-local", step: "1", value: utcInput(Math.max(Date.now(), alarm.target_ring_at)) });
  const box = el("div", { class: "actions", id: "actions" });
  const path = alarmPath(alarm.application, alarm.business_id);
  const act = (question, method, suffix, body, done) => async () => {
    if (!(await confirmAction(typeof question === "function" ? question() : question, el("p", {}, key(`${alarm.application} / ${alarm.business_id}`))))) return;
    try {
      await call(method, path + suffix, body());
      await rerender();
      flash(done);
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) {
        setReadOnly(true);
        await rerender();
      }
      flash(`${done.replace(/\.$/, "")} failed: ${error.message}`, true);
    }
  };
  const chosen = () => {
    const ms = parseUtc(when.value);
    if (ms === null) throw new ApiError(400, { error: { message: "choose a time" } });
    return ms;
  };
  if (alarm.status === "pending") {
    box.append(
      el("label", {}, "new time (UTC)", when),
      button("reschedule", "Reschedule", disabled, act(() => `Move this alarm to ${when.value.replace("T", " ")} UTC?`, "PATCH", "", () => ({ target_ring_at: chosen() }), "Rescheduled.")),
      button("cancel", "Cancel alarm", disabled, act("Cancel this alarm? It will never ring.", "DELETE", "", () => undefined, "Cancelled."), "danger"),
    );
  } else if (alarm.status === "dead" || alarm.status === "expired") {
    box.append(
      button("redrive", "Re-drive now", disabled, act("Re-drive this alarm now, with a fresh retry budget?", "POST", "/redrive", () => ({}), "Re-driven.")),
      el("label", {}, "or at (UTC)", when),
      button("redrive-at", "Re-drive at this time", disabled, act("Re-drive this alarm at the chosen time?", "POST", "/redrive", () => ({ target_ring_at: chosen() }), "Re-driven.")),
    );
  } else {
    box.append(el("span", { class: "muted" }, `A ${alarm.status} alarm has no action.`));
  }
  return box;
}

function button(id, label, disabled, onClick, kind = "") {
  return el("button", { type: "button", id: `action-${id}`, class: `write ${kind}`.trim(), disabled, title: disabled ? "read-only token" : null, on: { click: onClick } }, label);
}
