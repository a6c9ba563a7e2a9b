// The last hour from GET /v1/stats: for all applications together and for each one, rings
// and creates per second, the engine's lateness p50 and p99, and failed rings per minute.

import { lineChart } from "./chart.js";
import { el } from "./dom.js";

const TOTAL = "*";

function charts(points) {
  const minutes = points.map((p) => p.minute);
  const values = (field) => points.map((p) => (p[field] === undefined ? null : p[field]));
  return [
    lineChart({
      kind: "throughput",
      title: "Rings and creates per second",
      minutes,
      unit: "/s",
      series: [
        { name: "rings/s", key: "rings_per_s", values: values("rings_per_s"), area: true },
        { name: "creates/s", key: "creates_per_s", values: values("creates_per_s") },
      ],
    }),
    lineChart({
      kind: "lateness",
      title: "Lateness (engine), ms",
      minutes,
      unit: " ms",
      series: [
        { name: "p50", key: "lateness_p50_ms", values: values("lateness_p50_ms") },
        { name: "p99", key: "lateness_p99_ms", values: values("lateness_p99_ms") },
      ],
    }),
    lineChart({
      kind: "failed",
      title: "Failed rings per minute",
      minutes,
      series: [{ name: "failed", key: "failed", values: values("failed"), area: true }],
    }),
  ];
}

function group(name, title, points) {
  return el("section", { class: "chart-group", dataset: { application: name } }, el("h3", {}, title), el("div", { class: "charts" }, charts(points)));
}

export function statsCharts(stats) {
  if (stats.error) return el("p", { class: "error", id: "stats-error" }, `The statistics could not be read: ${stats.error.message}`);
  const series = stats.series || {};
  const more = stats.left_out === 1 ? "1 more application is" : `${(stats.left_out || 0).toLocaleString("en-US")} more applications are`;
  return el(
    "div",
    { id: "stats" },
    stats.left_out ? el("p", { id: "stats-left-out", class: "muted" }, `${more} counted in All applications only: the busiest are charted on their own, and any other by name (Chart an application, above).`) : null,
    stats.askedError ? el("p", { class: "error", id: "chart-error" }, `${stats.asked} could not be charted: ${stats.askedError.message}`) : null,
    series[TOTAL] ? group(TOTAL, "All applications", series[TOTAL]) : null,
    stats.applications.filter((name) => series[name]).map((name) => group(name, name, series[name])),
  );
}

// A field to chart an application by name, which the statistics may have left out; made once
// per page, so that the readings every few seconds do not wipe what is being typed.
// navigate: goes to a hash of the console, here "#overview?chart=<name>".
export function chartForm(asked, navigate) {
  const name = el("input", { name: "application", type: "text", size: "24", value: asked || "" });
  const chart = (event) => {
    event.preventDefault();
    const wanted = name.value.trim();
    navigate(wanted ? `#overview?chart=${encodeURIComponent(wanted)}` : "#overview");
  };
  return el("form", { id: "chart-form", class: "actions", on: { submit: chart } }, el("label", {}, "Chart an application", name), el("button", { type: "submit" }, "Chart"));
}
