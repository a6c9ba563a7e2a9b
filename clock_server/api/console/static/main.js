// The console's entry: log in, learn what the token may do, and show the page the URL's
// fragment names (#overview, #applications, #schedules, #search?...,
// #alarm/<application>/<business id>).

import { ApiError, call, forget, readOnly, setReadOnly, setToken, token } from "./api.js";
import { alarmPage } from "./alarm.js";
import { applicationsPage } from "./applications.js";
import { clearFlash } from "./confirm.js";
import { el, replace } from "./dom.js";
import { overviewPage } from "./overview.js";
import { schedulesPage } from "./schedules.js";
import { searchPage } from "./search.js";

const $ = (id) => document.getElementById(id);

// Whether the API takes this token (null: none) for the console, and whether it may act.
async function learnRole(candidate) {
  await call("GET", "/v1/applications", undefined, candidate); // 401 bad token, 403 not an admin
  try {
    const me = await call("GET", "/v1/whoami", undefined, candidate);
    setReadOnly(Boolean(me && me.read_only));
  } catch (error) {
    if (!(error instanceof ApiError) || error.status !== 404) throw error;
    setReadOnly(false); // a server without /v1/whoami: a 403 on an action tells instead
  }
}

async function start() {
  $("login").addEventListener("submit", login);
  $("logout").addEventListener("click", () => {
    forget();
    showLogin("");
  });
  window.addEventListener("hashchange", () => {
    clearFlash();
    render();
  });
  try {
    await learnRole(token());
    enter();
  } catch (error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
      forget();
      showLogin("");
    } else {
      showLogin(`The server did not answer: ${error.message}`);
    }
  }
}

async function login(event) {
  event.preventDefault();
  const input = $("token");
  const candidate = input.value.trim();
  input.value = "";
  try {
    await learnRole(candidate);
    setToken(candidate);
    enter();
  } catch (error) {
    forget();
    let message = error.message;
    if (error instanceof ApiError && error.status === 401) message = "This token is not valid.";
    if (error instanceof ApiError && error.status === 403) message = "This token is not an admin token: the console needs one for every application (* or *:read).";
    showLogin(message);
  }
}

function showLogin(message) {
  $("login").hidden = false;
  $("nav").hidden = true;
  $("logout").hidden = true;
  replace($("role"));
  replace($("page"));
  replace($("login-error"), message);
  $("token").focus();
}

function enter() {
  $("login").hidden = true;
  $("nav").hidden = false;
  $("logout").hidden = !token();
  render();
}

async function render() {
  const [route, rest] = splitHash();
  for (const link of document.querySelectorAll("#nav a")) link.classList.toggle("current", link.dataset.page === route);
  replace($("role"), token() ? (readOnly() ? "read-only token" : "admin token") : "no authentication");
  const page = $("page");
  try {
    const built = await build(route, rest);
    if (readOnly()) built.prepend(el("p", { class: "flash", id: "read-only-note" }, "Read-only token: actions are disabled."));
    replace(page, built);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      forget();
      showLogin("The token is no longer valid.");
      return;
    }
    replace(page, el("p", { class: "error", id: "page-error" }, `Could not load this page: ${error.message}`));
  }
}

function build(route, rest) {
  if (route === "applications") return applicationsPage(render);
  if (route === "schedules") return schedulesPage(render);
  if (route === "search") return searchPage(new URLSearchParams(rest), navigate);
  if (route === "alarm") {
    const slash = rest.indexOf("/");
    return alarmPage(decodeURIComponent(rest.slice(0, slash)), decodeURIComponent(rest.slice(slash + 1)), render);
  }
  return overviewPage(new URLSearchParams(rest), navigate);
}

// "#alarm/<a>/<b>" -> ["alarm", "<a>/<b>"]; "#search?x=1" -> ["search", "x=1"].
function splitHash() {
  const hash = location.hash.slice(1);
  const cut = hash.search(/[/?]/);
  if (cut < 0) return [hash || "overview", ""];
  return [hash.slice(0, cut), hash.slice(cut + 1)];
}

function navigate(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

start();
