"""A page of another site, opened in a real browser (Chromium driven by Playwright), tries what
a browser lets any page do to a clock server that runs without tokens, the zero-configuration
default: a "simple" cross-origin fetch that creates an alarm, a text/plain form that cancels
alarms by filter, a form with no field at all, a JSON fetch (preflighted), and a name of its
own that resolves to clock's address (DNS rebinding). Each is refused, and nothing changes.

A text/plain form sends `name=value`: the field below makes that the JSON filter
{"application": "orders", "business_id_prefix": "="}, which matches the victim alarm "=victim"."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Browser, sync_playwright

from tests.console_harness import chromium
from tests.support import ServerProcess, free_port

pytestmark = pytest.mark.process

REBOUND = "rebound.test"  # the attacker's name, resolved by the browser to clock's address

HOSTILE_PAGE = """<!doctype html>
<html><body>
<iframe name="sink-a"></iframe><iframe name="sink-b"></iframe>
<form id="filter" method="POST" action="CLOCK/v1/alarms/cancel" enctype="text/plain"
      target="sink-a">
  <input name='{"application": "orders", "business_id_prefix": "' value='"}'>
</form>
<form id="empty" method="POST" action="CLOCK/v1/alarms/cancel" enctype="text/plain"
      target="sink-b"></form>
<script>
window.outcomes = {};
const alarm = JSON.stringify({application: "orders", business_id: "planted", payload: "p",
                              delay_ms: 600000});
async function attack() {
  await fetch("CLOCK/v1/alarms", {method: "POST", mode: "no-cors", body: alarm,
                                  headers: {"Content-Type": "text/plain"}});
  window.outcomes.simple = "sent";
  try {
    const r = await fetch("CLOCK/v1/alarms", {method: "POST", body: alarm,
                                              headers: {"Content-Type": "application/json"}});
    window.outcomes.json = String(r.status);
  } catch (e) {
    window.outcomes.json = "blocked";
  }
  try {
    const r = await fetch("CLOCK/v1/alarms?application=orders");
    window.outcomes.read = String(r.status) + " " + (await r.text());
  } catch (e) {
    window.outcomes.read = "blocked";
  }
  document.getElementById("filter").submit();
  document.getElementById("empty").submit();
}
attack().then(() => { window.outcomes.done = true; });
</script>
</body></html>
"""


@pytest.fixture(scope="module")
def clock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """clock-server as installed by default: no tokens, on loopback."""
    directory = tmp_path_factory.mktemp("cross-site")
    env = {
        "CLOCK_DATABASE_URL": f"sqlite:///{directory / 'clock.db'}",
        "CLOCK_RUN_ENGINE": "false",
        "CLOCK_TOKENS": "",
        "CLOCK_TOKENS_FILE": "",
    }
    server = ServerProcess(env, Path(directory) / "server.log").start()
    try:
        yield server
    finally:
        server.ensure_stopped()


@pytest.fixture(scope="module")
def hostile_site(clock: ServerProcess) -> Iterator[str]:
    """Another origin (a name and port of its own) serving the page above."""
    page = HOSTILE_PAGE.replace("CLOCK", clock.base_url).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            pass

    port = free_port()
    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{port}/"  # localhost is another site than 127.0.0.1
    finally:
        httpd.shutdown()
        thread.join(5)
        httpd.server_close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium(),
            headless=True,
            args=["--headless", "--no-sandbox", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"],
        )
        yield launched
        launched.close()


def _alarms(clock: ServerProcess) -> dict[str, str]:
    response = requests.get(clock.base_url + "/v1/alarms?application=orders", timeout=5)
    assert response.status_code == 200, response.text
    return {alarm["business_id"]: alarm["status"] for alarm in response.json()["alarms"]}


def test_a_page_of_another_site_changes_nothing(
    clock: ServerProcess, hostile_site: str, browser: Browser
) -> None:
    created = requests.post(
        clock.base_url + "/v1/alarms",
        json={"application": "orders", "business_id": "=victim", "payload": "p",
              "delay_ms": 600_000},
        timeout=5,
    )  # fmt: skip
    assert created.status_code == 201
    page = browser.new_page()
    answers: list[tuple[str, int]] = []
    page.on("response", lambda r: answers.append((f"{r.request.method} {r.url}", r.status)))
    try:
        page.goto(hostile_site)
        page.wait_for_function("window.outcomes.done === true", timeout=10_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('iframe')].every("
            "f => { try { return f.contentWindow.location.href === 'about:blank' } "
            "catch (e) { return true } })",
            timeout=10_000,
        )  # both forms were answered (the frames left about:blank for clock's origin)
        outcomes = page.evaluate("window.outcomes")
    finally:
        page.close()
    to_clock = [(what, status) for what, status in answers if clock.base_url in what]
    posts = [status for what, status in to_clock if what.startswith("POST")]
    assert len(posts) >= 3 and set(posts) == {403}, to_clock  # the fetch and the two forms
    assert outcomes["json"] == "blocked"  # its preflight was refused: never sent
    assert outcomes["read"] == "blocked"  # and nothing to read across origins
    assert _alarms(clock) == {"=victim": "pending"}


def test_a_rebound_name_reads_nothing(clock: ServerProcess, browser: Browser) -> None:
    page = browser.new_page()
    try:
        response = page.goto(f"http://{REBOUND}:{clock.port}/v1/alarms?application=orders")
        assert response is not None and response.status == 421
        text = page.inner_text("body")
        assert "rebound.test" in text and "victim" not in text
        probe = page.goto(f"http://{REBOUND}:{clock.port}/livez")
        assert probe is not None and probe.status == 200  # probes answer to any name
    finally:
        page.close()
