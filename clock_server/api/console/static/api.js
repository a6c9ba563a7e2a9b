// The JSON API as the console calls it: the token from this tab's sessionStorage, sent only as
// a bearer header. No cookie is ever set, so another site cannot make the browser act.

const TOKEN_KEY = "clock.console.token";
const ROLE_KEY = "clock.console.read_only";
// The server's root, read from where this script was loaded (<root>/console/static/api.js),
// so that the console works under any path a reverse proxy serves it at.
const ROOT = new URL("../../", import.meta.url);

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.field = error.field || null;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function readOnly() {
  return sessionStorage.getItem(ROLE_KEY) === "true";
}

export function setReadOnly(value) {
  sessionStorage.setItem(ROLE_KEY, value ? "true" : "false");
}

export function forget() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(ROLE_KEY);
}

export async function call(method, path, body, withToken = token()) {
  const headers = { Accept: "application/json" };
  if (withToken) headers.Authorization = `Bearer ${withToken}`;
  const init = { method, headers, credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(apiUrl(path), init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_) {
    data = null;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

// An API path ("/v1/...") as a URL under the server's root.
export function apiUrl(path) {
  return new URL(path.replace(/^\/+/, ""), ROOT);
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") search.set(name, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

// An alarm's path: every "/" of its business_id is sent as %2F, as the SDK does.
export function alarmPath(application, businessId, suffix = "") {
  return `/v1/alarms/${encodeURIComponent(application)}/${encodeURIComponent(businessId)}${suffix}`;
}

// Per-minute statistics of the last `minutes`, of every application the token may see.
export function stats(minutes, application) {
  return call("GET", `/v1/stats${query({ minutes, application })}`);
}
