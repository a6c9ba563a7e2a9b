// Line and area charts drawn as SVG with DOM calls: no markup from data, no inline style
// (the colours are classes in console.css, which the Content-Security-Policy allows).

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 420;
const HEIGHT = 170;
const PAD = { left: 44, right: 10, top: 10, bottom: 22 };
const TICK_MINUTES = 15;

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// A number as a person reads it: 0, 0.183, 2.1, 42, 1,250, 12.5k.
export function formatNumber(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const size = Math.abs(value);
  if (size === 0) return "0";
  if (size >= 10000) return `${(value / 1000).toLocaleString("en-US", { maximumFractionDigits: 1 })}k`;
  if (size >= 100) return Math.round(value).toLocaleString("en-US");
  if (size >= 10) return value.toLocaleString("en-US", { maximumFractionDigits: 1 });
  return value.toLocaleString("en-US", { maximumSignificantDigits: 3 });
}

// The smallest of 1, 2, 5 times a power of ten at or above `max` (1 when there is nothing).
export function niceMax(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const step of [1, 2, 5, 10]) if (step * power >= max) return step * power;
  return 10 * power;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 16);
}

// The line through the points; a null leaves a gap.
function linePath(points) {
  let d = "";
  let pen = false;
  for (const [x, y] of points) {
    if (y === null) {
      pen = false;
      continue;
    }
    d += `${pen ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`;
    pen = true;
  }
  return d;
}

// The points with no drawn neighbour, which a path alone would not show.
function isolated(points) {
  const drawn = (i) => i >= 0 && i < points.length && points[i][1] !== null;
  return points.filter((_, i) => drawn(i) && !drawn(i - 1) && !drawn(i + 1));
}

function areaPath(points, base) {
  const drawn = points.filter(([, y]) => y !== null);
  if (!drawn.length) return "";
  const [first] = drawn;
  const last = drawn[drawn.length - 1];
  return `${linePath(drawn)}L${last[0].toFixed(1)},${base}L${first[0].toFixed(1)},${base}Z`;
}

/**
 * A chart of one value per minute.
 * kind: the figure's data-chart; minutes: the minutes' start times (epoch ms); series: [{name, key, values, area}], each
 * value a number or null; unit: shown after every number ("/s", " ms").
 */
export function lineChart({ kind, title, minutes, series, unit = "" }) {
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const base = PAD.top + plotH;
  const all = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
  const top = niceMax(Math.max(0, ...all));
  const step = minutes.length > 1 ? plotW / (minutes.length - 1) : 0;
  const x = (i) => PAD.left + (minutes.length > 1 ? i * step : plotW / 2);
  const y = (v) => (v === null || v === undefined ? null : base - (v / top) * plotH);

  const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "plot", role: "img", "aria-label": title });
  for (const fraction of [0, 0.5, 1]) {
    const at = base - fraction * plotH;
    chart.append(
      svg("line", { class: "grid", x1: PAD.left, x2: WIDTH - PAD.right, y1: at, y2: at }),
      svg("text", { class: "tick y", x: PAD.left - 4, y: at + 3.5 }, formatNumber(top * fraction)),
    );
  }
  minutes.forEach((minute, i) => {
    if (minute % (TICK_MINUTES * 60000) !== 0) return;
    chart.append(
      svg("line", { class: "grid", x1: x(i), x2: x(i), y1: PAD.top, y2: base }),
      svg("text", { class: "tick x", x: x(i), y: HEIGHT - 6 }, clock(minute)),
    );
  });
  series.forEach((s, n) => {
    const points = s.values.map((v, i) => [x(i), y(v)]);
    if (s.area) chart.append(svg("path", { class: `area s${n}`, d: areaPath(points, base) }));
    chart.append(svg("path", { class: `line s${n}`, d: linePath(points), "data-series": s.key }));
    for (const [cx, cy] of isolated(points)) {
      chart.append(svg("circle", { class: `point s${n}`, cx: cx.toFixed(1), cy: cy.toFixed(1), r: 2.5, "data-series": s.key }));
    }
  });
  // One column per minute, whose tooltip holds every series' value there.
  minutes.forEach((minute, i) => {
    const lines = series.map((s) => `${s.name}: ${formatNumber(s.values[i])}${s.values[i] === null ? "" : unit}`);
    const left = Math.max(PAD.left, x(i) - step / 2);
    const width = Math.max(1, Math.min(x(i) + step / 2, WIDTH - PAD.right) - left);
    chart.append(
      svg("rect", { class: "hover", x: left, y: PAD.top, width, height: plotH }, svg("title", {}, `${clock(minute)} UTC\n${lines.join("\n")}`)),
    );
  });

  const figure = document.createElement("figure");
  figure.className = "chart";
  figure.dataset.chart = kind;
  const caption = document.createElement("figcaption");
  caption.textContent = title;
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((s, n) => {
    const item = document.createElement("span");
    item.className = `key-item s${n}`;
    const latest = s.values.length ? s.values[s.values.length - 1] : null;
    item.textContent = `${s.name} (latest ${formatNumber(latest)}${latest === null ? "" : unit})`;
    legend.append(item);
  });
  figure.append(caption, chart, legend);
  return figure;
}
