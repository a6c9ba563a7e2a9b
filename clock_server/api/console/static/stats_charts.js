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
  return el(
    "div",
    { id: "stats" },
    series[TOTAL] ? group(TOTAL, "All applications", series[TOTAL]) : null,
    stats.applications.filter((name) => series[name]).map((name) => group(name, name, series[name])),
  );
}
