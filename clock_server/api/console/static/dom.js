// Building the page. Every piece of data goes in as text (textContent, attribute values),
// never as markup, so a payload or key holding HTML or <script> is shown, not run.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "on") {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (name in node && typeof value !== "string") {
      node[name] = value;
    } else {
      node.setAttribute(name, value === true ? "" : value);
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

export function table(headers, rows, attrs = {}) {
  return el(
    "table",
    attrs,
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows),
  );
}

export function cell(value, attrs = {}) {
  return el("td", attrs, value);
}

export function num(value) {
  return el("td", { class: "num" }, value === null || value === undefined ? "–" : value.toLocaleString("en-US"));
}

// A capped count: "≥ 10,000" when counting stopped at the cap.
export function capped(count) {
  const text = count.count.toLocaleString("en-US");
  return count.capped ? `≥ ${text}` : text;
}

export function time(ms) {
  if (ms === null || ms === undefined) return "–";
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return String(ms);
  return `${date.toISOString().replace("T", " ").replace("Z", "")} UTC`;
}

export function timeCell(ms) {
  return el("td", { title: ms === null || ms === undefined ? "" : String(ms) }, time(ms));
}

export function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const size = Math.abs(ms);
  if (size < 1000) return `${ms} ms`;
  if (size < 120000) return `${tenths(ms / 1000)} s`;
  if (size < 7200000) return `${tenths(ms / 60000)} min`;
  if (size < 86400000) return `${tenths(ms / 3600000)} h`;
  return `${tenths(ms / 86400000)} d`;
}

// What is wrong with a number field's text before anything is asked or sent (null when it
// is empty or a number of 0 or more), worded as the server words it.
export function numberProblem(name, raw) {
  const text = raw.trim();
  if (text === "") return null;
  const value = Number(text);
  if (!Number.isFinite(value)) return `${name} must be a number, not ${JSON.stringify(text)}`;
  return value < 0 ? `${name} must be 0 or more, not ${text}` : null;
}

// 60 as "60", 2.25 as "2.3".
function tenths(value) {
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

// "2026-11-24T10:00" or "2026-11-24T10:00:05" from an <input type=datetime-local>, read as UTC.
export function parseUtc(value) {
  if (!value) return null;
  const ms = Date.parse(`${value}Z`);
  return Number.isNaN(ms) ? null : ms;
}

export function utcInput(ms) {
  return new Date(ms).toISOString().slice(0, 19);
}

export function key(text) {
  return el("span", { class: "key", dir: "auto" }, text);
}

export function alarmLink(application, businessId) {
  const href = `#alarm/${encodeURIComponent(application)}/${encodeURIComponent(businessId)}`;
  return el("a", { href, class: "key", dir: "auto" }, businessId);
}
