"""The operator's console in a real browser: Chromium driven by Playwright clicks through every
page and action of /console, served by a whole clock server on MariaDB and RabbitMQ, and
checks what each page shows. Keys and payloads hold HTML, <script> and right-to-left text.

Each page is saved as a screenshot in a temporary folder, or in CLOCK_CONSOLE_SCREENSHOTS:
`CLOCK_CONSOLE_SCREENSHOTS=docs/console` regenerates the documentation's screenshots."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import Browser, Page, expect, sync_playwright

from clock_client.errors import WebhookVerificationError
from clock_client.webhooks import verify as verify_webhook
from clock_server.occurrences import occurrence_key
from tests.console_harness import ADMIN, ORDERS, READER, ConsoleServer, chromium, console_server
from tests.reverse_proxy import reverse_proxy
from tests.webhook_receiver import receiving

pytestmark = [pytest.mark.mariadb, pytest.mark.rabbitmq]

# A whole minute near the browser's own time, taken when the module's server starts, not at
# import: in the whole suite the module runs many minutes after collection, and a webhook
# signed more than five minutes before the verifier's time does not verify.
NOW = 0
MIN = 60_000
DASH = "\u2013"  # what the console shows for a null setting
SCRIPT_ID = "<script>window.pwned=1</script>"
IMG_ID = "<img src=x onerror=window.pwned=1>"
RTL_ID = "طلب-٤٢ הזמנה"
HOSTILE = {
    SCRIPT_ID: "<script>window.pwned=1</script><b>bold</b>",
    IMG_ID: '"><img src=x onerror="window.pwned=1"><iframe src="/console"></iframe>',
    RTL_ID: "مرحبا بالعالم ‮gnirts desrever‬ שלום & <i>",
}


CHARTS = [
    ("throughput", "rings_per_s"),
    ("throughput", "creates_per_s"),
    ("lateness", "lateness_p50_ms"),
    ("lateness", "lateness_p99_ms"),
    ("failed", "failed"),
]
HISTORY_MINUTES = 20
# Orders rung in each of the minutes before NOW, none in some, for the charts.
HISTORY = [(m * 7) % 5 * 8 for m in range(HISTORY_MINUTES)]


@pytest.fixture(scope="module")
def server() -> Iterator[ConsoleServer]:
    # Webhooks may go to a receiver on this machine; a reverse proxy in front is trusted to
    # say the path it serves the server under.
    global NOW
    NOW = (int(time.time()) // 60) * 60_000
    start = NOW - HISTORY_MINUTES * MIN
    with console_server(start, webhook_allow_private=True, trusted_proxy_hops=1) as clock:
        seed_history(clock)
        seed(clock)
        yield clock


def seed_history(s: ConsoleServer) -> None:
    """Orders created and rung in each minute before NOW, up to a second late."""
    s.bind("orders")
    for m, count in enumerate(HISTORY):
        start = NOW - (HISTORY_MINUTES - m) * MIN
        s.step(start)
        for n in range(count):
            s.create("orders", f"h-{m:02d}-{n}", "history", target_ring_at=start + n * 25)
        s.step(start + 1000)
    s.step(NOW)


def seed(s: ConsoleServer) -> None:
    """60 pending orders, three with hostile keys, one rung; a billing alarm moved, failed
    twice and dead; two flaky alarms expired."""
    for n in range(60):
        s.create("orders", f"o-{n:02d}", f"payload {n}", target_ring_at=NOW + 10 * MIN + n * 1000)
    for business_id, payload in HOSTILE.items():
        s.create("orders", business_id, payload, target_ring_at=NOW + 20 * MIN)
    s.create("orders", "o-ring", "rings first", target_ring_at=NOW + 1000)
    s.api("PUT", "/v1/applications/billing", json={"retry_max": 1})
    s.create("billing", "inv/7", '{"invoice": 7}', target_ring_at=NOW + 5000)
    s.api("PATCH", "/v1/alarms/billing/inv%2F7", json={"target_ring_at": NOW + 6000})
    for n in (1, 2):
        s.create("flaky", f"exp-{n}", "late", target_ring_at=NOW + 2000, latest_ring_at=NOW + 3000)
    s.step(NOW + 1000)  # o-ring rings
    s.step(NOW + 4000)  # the flaky ones are past their cutoff
    s.step(NOW + 6000)  # inv/7: first attempt, unroutable
    alarm = s.api("GET", "/v1/alarms/billing/inv%2F7")
    s.step(alarm["next_try_time"])  # the second attempt fails too: dead
    assert s.api("GET", "/v1/alarms/billing/inv%2F7")["status"] == "dead"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium(), headless=True, args=["--headless", "--no-sandbox"]
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = os.environ.get("CLOCK_CONSOLE_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("console")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def page(browser: Browser, server: ConsoleServer) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    yield tab
    assert tab.evaluate("window.pwned") is None, "a payload or key ran as script"
    context.close()
    unexpected = [e for e in errors if "the server responded with a status of" not in e]
    assert not unexpected, unexpected


def login(page: Page, server: ConsoleServer, token: str = ADMIN, where: str = "") -> None:
    page.goto(f"{server.base_url}/console{where}")
    page.fill("#token", token)
    page.click("#login button[type=submit]")
    expect(page.locator("#nav")).to_be_visible()


def confirm(page: Page) -> None:
    expect(page.locator("#confirm")).to_be_visible()
    page.click("#confirm-yes")


def test_login_then_overview(page: Page, server: ConsoleServer, shots: Path):
    page.goto(f"{server.base_url}/console")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#token", "not-a-valid-token-0123456789")
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_have_text("This token is not valid.")
    page.fill("#token", ORDERS)
    page.click("#login button[type=submit]")
    expect(page.locator("#login-error")).to_contain_text("not an admin token")

    page.fill("#token", ADMIN)
    page.click("#login button[type=submit]")
    expect(page.locator("#role")).to_have_text("admin token")
    expect(page.locator("#card-database .value")).to_have_text("ok")
    expect(page.locator("#card-broker .value")).to_have_text("ok")
    expect(page.locator("#card-live-engines .value")).to_have_text("1")
    expect(page.locator("#engines tbody tr")).to_have_count(1)
    # the one engine's share: every slot, from its first beat on
    expect(page.locator("#engines tbody tr td").nth(4)).to_have_text("0-1023")
    expect(page.locator("#engines tbody tr td").nth(5)).to_have_text("100.0 %")
    statuses = {
        "pending": "63", "delivering": "0", "rung": str(1 + sum(HISTORY)), "cancelled": "0",
        "expired": "2", "dead": "1",
    }  # fmt: skip
    for status, count in statuses.items():
        expect(page.locator(f"#card-status-{status} .value")).to_have_text(count)
    expect(page.locator("#card-overdue .value")).to_have_text("0")
    expect(page.locator("#due .card .label")).to_have_text(
        ["Overdue", "Due within 60 s", "Due within 5 min", "Due within 15 min"]
    )
    late = server.api("GET", "/v1/overview")["lateness"]
    expect(page.locator("#card-sample .value")).to_have_text(f"{late['sample']:,}")
    expect(page.locator("#card-p99 .value")).to_have_text(re.compile(r"^\d+(\.\d)? m?s$"))
    orders = page.locator("#by-application tr[data-application=orders] td")
    expect(orders).to_have_text(["orders", "63", "0"])
    expect(page.locator("#by-application tr[data-application=billing] td")).to_have_text(
        ["billing", "0", "1"]
    )
    page.screenshot(path=shots / "overview.png", full_page=True)

    assert ADMIN not in page.url
    assert page.context.cookies() == []
    stored = page.evaluate("sessionStorage.getItem('clock.console.token')")
    assert stored == ADMIN and page.evaluate("localStorage.length") == 0
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate("sessionStorage.length") == 0


def chart_line(page: Page, application: str, kind: str, series: str) -> Any:
    group = page.locator(f'#stats .chart-group[data-application="{application}"]')
    return group.locator(f"figure[data-chart={kind}] path.line[data-series={series}]")


def test_the_overview_charts_the_last_hour(page: Page, server: ConsoleServer):
    login(page, server)
    groups = page.locator("#stats .chart-group")
    expect(groups.locator("h3")).to_contain_text(["All applications", "orders"])
    for application in ("*", "orders"):
        for kind, series in CHARTS:
            line = chart_line(page, application, kind, series)
            expect(line).to_have_attribute("d", re.compile(r"^M[\d.]+,[\d.]+L"))
    stats = server.api("GET", "/v1/stats?minutes=60&application=orders")["series"]["orders"]
    assert sum(minute["rung"] for minute in stats) == 1 + sum(HISTORY)
    columns = page.locator('#stats .chart-group[data-application="*"] rect.hover')
    expect(columns).to_have_count(3 * len(stats))  # a tooltip per minute in each chart
    lateness = chart_line(page, "orders", "lateness", "lateness_p99_ms").get_attribute("d")
    assert lateness is not None and lateness.count("M") > 1, "minutes without rings leave gaps"
    failed_total = chart_line(page, "*", "failed", "failed").get_attribute("d")
    failed_orders = chart_line(page, "orders", "failed", "failed").get_attribute("d")
    assert failed_total != failed_orders  # billing's failed attempts and flaky's expiries


def logged_in_on_a_paused_clock(page: Page, server: ConsoleServer) -> list[str]:
    """The page logged in with its timers on Playwright's clock, paused; returns the list
    the page's reads of /v1/stats are appended to."""
    page.clock.install()
    page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))
    stats_read: list[str] = []
    page.on("request", lambda r: stats_read.append(r.url) if "/v1/stats" in r.url else None)
    login(page, server)
    return stats_read


def test_the_overview_refreshes_until_paused(page: Page, server: ConsoleServer):
    stats_read = logged_in_on_a_paused_clock(page, server)
    rung = page.locator("#card-status-rung .value")
    rings = chart_line(page, "orders", "throughput", "rings_per_s")
    expect(rings).to_have_attribute("d", re.compile("L"))
    before = (rung.inner_text(), rings.get_attribute("d"))

    ring_more(server, "refresh", 30)
    page.clock.run_for(5_000)
    expect(rung).not_to_have_text(before[0])
    expect(rings).not_to_have_attribute("d", before[1] or "")
    expect(page.locator("#refresh-state")).to_contain_text("Every 5 s")

    page.click("#refresh-toggle")
    expect(page.locator("#refresh-toggle")).to_have_text("Resume")
    expect(page.locator("#refresh-state")).to_contain_text("Paused")
    paused = (rung.inner_text(), rings.get_attribute("d"), len(stats_read))
    ring_more(server, "paused", 20)
    page.clock.run_for(60_000)
    page.evaluate("fetch('/console/static/api.js').then((r) => r.text())")  # a round trip
    assert (rung.inner_text(), rings.get_attribute("d"), len(stats_read)) == paused

    page.click("#refresh-toggle")
    expect(page.locator("#refresh-toggle")).to_have_text("Pause")
    page.clock.run_for(1)
    expect(rung).not_to_have_text(paused[0])


HIDE_TAB = """hidden => {
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_the_overview_is_not_read_while_its_tab_is_hidden(page: Page, server: ConsoleServer):
    stats_read = logged_in_on_a_paused_clock(page, server)
    rung = page.locator("#card-status-rung .value")
    expect(page.locator("#refresh-state")).to_contain_text("Every 5 s")
    page.evaluate(HIDE_TAB, True)
    hidden = (rung.inner_text(), len(stats_read))
    ring_more(server, "hidden", 10)
    page.clock.run_for(60_000)
    page.evaluate("fetch('/console/static/api.js').then((r) => r.text())")  # a round trip
    assert (rung.inner_text(), len(stats_read)) == hidden

    page.evaluate(HIDE_TAB, False)
    page.clock.run_for(1)
    expect(rung).not_to_have_text(hidden[0])  # read again as soon as it is shown


def ring_more(server: ConsoleServer, prefix: str, count: int) -> None:
    """`count` orders created and rung now, on the server's clock."""
    now = server.clock.now_ms()
    for n in range(count):
        server.create("orders", f"{prefix}-{n}", "more", target_ring_at=now + 100 + n)
    server.step(now + 200)
    assert server.api("GET", f"/v1/alarms/orders/{prefix}-{count - 1}")["status"] == "rung"


def test_applications_are_listed_and_edited(page: Page, server: ConsoleServer, shots: Path):
    login(page, server, where="#applications")
    rows = page.locator("#application-table tbody tr")
    expect(rows).to_have_count(3)
    billing = page.locator("#application-table tr[data-application=billing]")
    expect(billing.locator("td[data-setting=retry_max]")).to_have_text("1")
    orders = page.locator("#application-table tr[data-application=orders]")
    expect(orders.locator("td").nth(1)).to_have_text("63")  # pending
    page.screenshot(path=shots / "applications.png", full_page=True)

    orders.get_by_role("button", name="Edit").click()
    page.fill("#edit-application input[name=max_pending]", "5000")
    page.fill("#edit-application input[name=ring_rate_per_s]", "250.5")
    page.click("#edit-application button[type=submit]")
    expect(page.locator("#confirm-extra")).to_contain_text(f"max_pending: {DASH} → 5000")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Saved the settings of orders.")
    expect(orders.locator("td[data-setting=max_pending]")).to_have_text("5000")
    expect(orders.locator("td[data-setting=ring_rate_per_s]")).to_have_text("250.5")
    assert server.api("GET", "/v1/applications/orders")["max_pending"] == 5000

    billing.get_by_role("button", name="Edit").click()
    page.fill("#edit-application input[name=retry_max]", "")
    page.fill("#edit-application input[name=create_burst]", "7")  # needs a create rate
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(page.locator("#flash")).to_contain_text("Not saved:")
    expect(page.locator("#flash")).to_contain_text("create_burst")
    assert server.api("GET", "/v1/applications/billing")["retry_max"] == 1


def test_search_by_filters_in_keyset_pages(page: Page, server: ConsoleServer, shots: Path):
    login(page, server, where="#search")
    page.fill("#search-form input[name=application]", "orders")
    page.select_option("#search-form select[name=status]", "pending")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#page-info")).to_have_text("Page 1: 50 alarms.")
    first_page = page.locator("#alarm-table tbody tr").all_inner_texts()
    page.click("#next-page")
    expect(page.locator("#page-info")).to_have_text("Page 2: 13 alarms.")
    expect(page.locator("#next-page")).to_be_disabled()
    page.screenshot(path=shots / "search.png", full_page=True)
    page.click("#previous-page")
    expect(page.locator("#page-info")).to_have_text("Page 1: 50 alarms.")
    assert page.locator("#alarm-table tbody tr").all_inner_texts() == first_page

    page.fill("#search-form input[name=business_id]", "o-5")
    page.select_option("#search-form select[name=mode]", "prefix")
    page.click("#search-form button[type=submit]")
    ids = page.locator("#alarm-table tbody tr td:nth-child(2)")
    expect(ids).to_have_text([f"o-5{n}" for n in range(10)])

    page.select_option("#search-form select[name=mode]", "exact")
    page.fill("#search-form input[name=business_id]", SCRIPT_ID)
    page.click("#search-form button[type=submit]")
    expect(ids).to_have_text([SCRIPT_ID])
    page.fill("#search-form input[name=business_id]", "missing")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#page-info")).to_have_text("No such alarm.")

    page.fill("#search-form input[name=business_id]", "")
    page.select_option("#search-form select[name=status]", "")
    due = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((NOW + 10 * MIN + 3000) / 1000))
    until = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((NOW + 10 * MIN + 6000) / 1000))
    page.fill("#search-form input[name=due_from]", due)
    page.fill("#search-form input[name=due_to]", until)
    page.click("#search-form button[type=submit]")
    expect(ids).to_have_text(["o-03", "o-04", "o-05"])


def test_keys_and_payloads_show_as_text(page: Page, server: ConsoleServer, shots: Path):
    hostile = f"application=orders&due_from={NOW + 20 * MIN}&due_to={NOW + 20 * MIN + 1}"
    login(page, server, where=f"#search?{hostile}")
    expect(page.locator("#alarm-table tbody tr")).to_have_count(3)
    for business_id, payload in HOSTILE.items():
        link = page.locator("#alarm-table a", has_text=business_id)
        expect(link).to_have_text(business_id)
        link.click()
        expect(page.locator("#payload")).to_have_text(payload)
        expect(page.locator("#fields tr[data-field=business_id] td").nth(1)).to_have_text(
            business_id
        )
        expect(page.locator("#alarm h1 .key")).to_have_text(business_id)
        injected = page.locator("#page script, #page img, #page iframe, #page b, #page i")
        expect(injected).to_have_count(0)
        page.go_back()
    page.locator("#alarm-table a", has_text=RTL_ID).click()
    expect(page.locator("#payload")).to_have_attribute("dir", "auto")
    page.screenshot(path=shots / "hostile.png", full_page=True)


def test_reschedule_and_cancel_ask_and_land_in_history(page: Page, server: ConsoleServer):
    login(page, server, where="#alarm/orders/o-10")
    expect(page.locator("#fields tr[data-field=status] td").nth(1)).to_have_text("pending")
    moved_to = NOW + 30 * MIN
    page.fill("#when", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moved_to / 1000)))
    page.click("#action-reschedule")
    page.click("#confirm-no")  # back: nothing changes
    assert server.api("GET", "/v1/alarms/orders/o-10")["target_ring_at"] != moved_to
    page.click("#action-reschedule")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Rescheduled.")
    assert server.api("GET", "/v1/alarms/orders/o-10")["target_ring_at"] == moved_to
    expect(page.locator("#history tr[data-kind=moved] td").nth(2)).to_have_text("admin")

    page.click("#action-cancel")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Cancelled.")
    expect(page.locator("#fields tr[data-field=status] td").nth(1)).to_have_text("cancelled")
    expect(page.locator("#history tbody tr td:nth-child(2)")).to_have_text(
        ["created", "moved", "cancelled"]
    )
    expect(page.locator("#actions")).to_have_text("A cancelled alarm has no action.")


def test_a_dead_alarm_story_and_its_redrive(page: Page, server: ConsoleServer, shots: Path):
    login(page, server, where="#search?application=billing")
    page.locator("#alarm-table a", has_text="inv/7").click()
    kinds = page.locator("#history tbody tr td:nth-child(2)")
    api_kinds = [
        e["kind"] for e in server.api("GET", "/v1/alarms/billing/inv%2F7/events")["events"]
    ]
    assert api_kinds[:2] == ["created", "moved"] and api_kinds[-1] == "dead"
    expect(kinds).to_have_text(api_kinds)
    expect(page.locator("#history tr[data-kind=attempt_failed]").first).to_contain_text(
        "refused by the broker"
    )
    server.bind("billing")
    page.click("#action-redrive")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Re-driven.")
    expect(page.locator("#fields tr[data-field=status] td").nth(1)).to_have_text("pending")
    expect(page.locator("#history tr[data-kind=redriven] td").nth(2)).to_have_text("admin")
    server.step(server.api("GET", "/v1/alarms/billing/inv%2F7")["next_try_time"])
    page.reload()
    expect(page.locator("#fields tr[data-field=status] td").nth(1)).to_have_text("rung")
    expect(kinds).to_have_text([*api_kinds, "redriven", "rung"])
    page.screenshot(path=shots / "alarm.png", full_page=True)


def test_bulk_redrive_and_cancel_by_filter(page: Page, server: ConsoleServer):
    login(page, server, where="#search?application=flaky&status=expired")
    expect(page.locator("#alarm-table tbody tr")).to_have_count(2)
    page.click("#bulk-redrive")
    expect(page.locator("#confirm-extra")).to_contain_text("status: expired")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Re-drive: 2 alarms changed.")
    expect(page.locator("#alarm-table tbody tr")).to_have_count(0)
    page.select_option("#search-form select[name=status]", "pending")
    page.click("#search-form button[type=submit]")
    expect(page.locator("#alarm-table tbody tr")).to_have_count(2)
    page.click("#bulk-cancel")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Cancel: 2 alarms changed.")
    found = server.api("GET", "/v1/alarms?application=flaky")["alarms"]
    assert [a["status"] for a in found] == ["cancelled", "cancelled"]


def test_a_read_only_token_sees_everything_and_cannot_act(page: Page, server: ConsoleServer):
    login(page, server, token=READER)
    expect(page.locator("#role")).to_have_text("read-only token")
    expect(page.locator("#read-only-note")).to_be_visible()
    expect(page.locator("#card-database .value")).to_have_text("ok")
    page.goto(f"{server.base_url}/console#alarm/orders/o-20")
    expect(page.locator("#action-cancel")).to_be_disabled()
    expect(page.locator("#action-reschedule")).to_be_disabled()
    page.goto(f"{server.base_url}/console#search?application=orders")
    expect(page.locator("#bulk-redrive")).to_be_disabled()
    expect(page.locator("#bulk-cancel")).to_be_disabled()
    page.goto(f"{server.base_url}/console#applications")
    page.locator("tr[data-application=orders]").get_by_role("button", name="Edit").click()
    expect(page.locator("#edit-application button[type=submit]")).to_be_disabled()


def test_console_responses_carry_strict_headers(server: ConsoleServer):
    for path in ("/console", "/console/", "/console/static/main.js"):
        response = requests.get(server.base_url + path, timeout=5)
        assert response.status_code == 200
        policy = response.headers["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy and "form-action 'none'" in policy
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "Set-Cookie" not in response.headers
    assert requests.get(server.base_url + "/v1/overview", timeout=5).status_code == 401
    overview: Any = server.api("GET", "/v1/overview", token=READER)
    assert overview["by_status"]["dead"]["count"] >= 0


def test_the_detail_of_a_count_triggered_alarm_shows_its_count(page: Page, server: ConsoleServer):
    server.create("orders", "count-1", "p", ring_after_count=3, target_ring_at=NOW + 60 * MIN)
    server.api("POST", "/v1/alarms/orders/count-1/count", json={"increment_id": "a", "by": 2})
    login(page, server, where="#alarm/orders/count-1")
    expect(page.locator("#fields tr[data-field=ring_after_count] td").nth(1)).to_have_text("3")
    expect(page.locator("#fields tr[data-field=count] td").nth(1)).to_have_text("2")
    server.api("POST", "/v1/alarms/orders/count-1/count", json={"increment_id": "b"})
    page.reload()
    expect(page.locator("#history tr[data-kind=count_reached] td").nth(3)).to_have_text(
        "count 3 of 3"
    )


def test_the_channel_of_an_application_is_edited_in_its_form(page: Page, server: ConsoleServer):
    server.api("PUT", "/v1/applications/feeds", json={"retry_max": 2})
    login(page, server, where="#applications")
    feeds = page.locator("#application-table tr[data-application=feeds]")
    expect(feeds.locator("td[data-setting=channel]")).to_have_text("amqp")
    feeds.get_by_role("button", name="Edit").click()
    page.select_option("#edit-application select[name=channel]", "webhook")
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(page.locator("#flash")).to_contain_text("Not saved:")
    expect(page.locator("#flash")).to_contain_text("webhook_url")
    assert server.api("GET", "/v1/applications/feeds")["channel"] == "amqp"

    # An address, not a name: nothing is looked up, and no alarm of feeds falls due.
    page.fill("#edit-application input[name=webhook_url]", "https://93.184.215.14/clock")
    page.fill("#edit-application input[name=webhook_max_in_flight]", "4")
    page.click("#edit-application button[type=submit]")
    expect(page.locator("#confirm-extra")).to_contain_text("channel: amqp → webhook")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Saved the settings of feeds.")
    expect(feeds.locator("td[data-setting=channel]")).to_have_text("webhook")
    stored = server.api("GET", "/v1/applications/feeds")
    assert (stored["webhook_url"], stored["webhook_max_in_flight"]) == (
        "https://93.184.215.14/clock", 4,
    )  # fmt: skip
    assert stored["webhook_secret_set"] and stored["retry_max"] == 2

    feeds.get_by_role("button", name="Edit").click()
    expect(page.locator("#edit-application input[name=webhook_url]")).to_have_value(
        "https://93.184.215.14/clock"
    )
    page.select_option("#edit-application select[name=channel]", "pull")
    page.fill("#edit-application input[name=pull_visibility_s]", "90")
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Saved the settings of feeds.")
    expect(feeds.locator("td[data-setting=channel]")).to_have_text("pull")
    stored = server.api("GET", "/v1/applications/feeds")
    assert (stored["channel"], stored["pull_visibility_s"]) == ("pull", 90)


def test_each_channel_setting_is_edited_and_a_refused_one_says_why_beside_it(
    page: Page, server: ConsoleServer
):
    server.api("PUT", "/v1/applications/hooked", json={"channel": "pull"})
    login(page, server, where="#applications")
    hooked = page.locator("#application-table tr[data-application=hooked]")
    hooked.get_by_role("button", name="Edit").click()
    form = page.locator("#edit-application")
    expect(form.locator("input[name=webhook_url]")).to_be_hidden()  # the chosen channel's only
    page.select_option("#edit-application select[name=channel]", "webhook")
    form.locator("input[name=webhook_url]").fill("ftp://93.184.215.14/clock")
    form.locator("input[name=webhook_timeout_s]").fill("2.5")
    page.click("#edit-application button[type=submit]")
    confirm(page)
    message = "webhook_url must start with http:// or https://, not ftp://"
    expect(form.locator("[data-error-for=webhook_url]")).to_have_text(message)
    expect(form.locator("[data-error-for=webhook_timeout_s]")).to_have_text("")
    stored = server.api("GET", "/v1/applications/hooked?counts=false")
    assert (stored["channel"], stored["webhook_url"], stored["webhook_timeout_s"]) == (
        "pull", None, None,
    )  # fmt: skip

    form.locator("input[name=webhook_url]").fill("https://93.184.215.14/hooked")
    form.locator("input[name=webhook_max_in_flight]").fill("3")
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Saved the settings of hooked.")
    stored = server.api("GET", "/v1/applications/hooked?counts=false")
    assert {k: stored[k] for k in ("channel", "webhook_url", "webhook_timeout_s",
                                   "webhook_max_in_flight", "pull_visibility_s")} == {
        "channel": "webhook", "webhook_url": "https://93.184.215.14/hooked",
        "webhook_timeout_s": 2.5, "webhook_max_in_flight": 3, "pull_visibility_s": None,
    }  # fmt: skip

    hooked.get_by_role("button", name="Edit").click()
    form.locator("input[name=retry_max]").fill("-1")  # refused in the page, beside the field
    page.click("#edit-application button[type=submit]")
    expect(form.locator("[data-error-for=retry_max]")).to_have_text(
        "retry_max must be 0 or more, not -1"
    )
    expect(page.locator("#confirm")).to_be_hidden()
    expect(page.locator("#flash")).to_contain_text("retry_max must be 0 or more")
    hooked.get_by_role("button", name="Edit").click()
    form.locator("input[name=webhook_timeout_s]").fill("301")  # over the API's 300 s
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(form.locator("[data-error-for=webhook_timeout_s]")).to_contain_text("webhook_timeout_s")
    assert server.api("GET", "/v1/applications/hooked")["webhook_timeout_s"] == 2.5
    hooked.get_by_role("button", name="Edit").click()  # the form again, as stored
    page.select_option("#edit-application select[name=channel]", "pull")
    form.locator("input[name=pull_visibility_s]").fill("45")
    page.click("#edit-application button[type=submit]")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Saved the settings of hooked.")
    stored = server.api("GET", "/v1/applications/hooked?counts=false")
    assert (stored["channel"], stored["pull_visibility_s"]) == ("pull", 45)


def test_the_webhook_secret_is_rotated_shown_once_and_the_old_one_signs_for_the_overlap(
    page: Page, server: ConsoleServer
):
    rotation = "/v1/applications/signed/webhook-secret"
    with receiving() as receiver:
        server.api(
            "PUT",
            "/v1/applications/signed",
            json={"channel": "webhook", "webhook_url": receiver.url()},
        )
        old = server.api("GET", rotation)["webhook_secret"]
        login(page, server, where="#applications")
        signed = page.locator("#application-table tr[data-application=signed]")
        signed.get_by_role("button", name="Edit").click()
        section = page.locator("#webhook-secret")
        expect(section).to_contain_text("it is not shown again")
        assert old not in page.content()  # a stored secret is never shown

        section.locator("input[name=overlap_s]").fill("-5")  # refused in the page, unasked
        section.locator("#rotate-secret").click()
        expect(section.locator("[data-error-for=overlap_s]")).to_have_text(
            "overlap_s must be 0 or more, not -5"
        )
        expect(page.locator("#confirm")).to_be_hidden()
        assert server.api("GET", rotation)["webhook_secret"] == old

        section.locator("input[name=overlap_s]").fill("700000")  # over the API's week
        section.locator("#rotate-secret").click()
        confirm(page)
        expect(section.locator("[data-error-for=overlap_s]")).to_contain_text("overlap_s")
        assert server.api("GET", rotation)["webhook_secret"] == old

        t0 = server.clock.now_ms()
        section.locator("input[name=overlap_s]").fill("60")
        section.locator("#rotate-secret").click()
        expect(page.locator("#confirm-extra")).to_contain_text("for 60 s")
        confirm(page)
        expect(page.locator("#flash")).to_have_text("Rotated the webhook secret of signed.")
        new = page.locator("#new-secret-value").inner_text()
        read = server.api("GET", rotation)
        assert new.startswith("whsec_") and new != old
        assert (read["webhook_secret"], read["previous_secret_signs_until"]) == (new, t0 + 60_000)
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((t0 + 60_000) / 1000))
        expect(page.locator("#previous-secret-until")).to_contain_text(until)

        # During the overlap each webhook carries both signatures; after it, the new one only.
        # (The engine reads the registry again every CLOCK_APPLICATION_REFRESH_S, 2 s.)
        server.create("signed", "during", "p", target_ring_at=t0 + 5_000)
        server.step(t0 + 5_000)
        [during] = receiver.wait_for(1)
        for secret in (old, new):
            assert verify_webhook(secret, during.headers, during.body).business_id == "during"
        server.create("signed", "after", "p", target_ring_at=t0 + 60_000)
        server.step(t0 + 60_000)
        after = receiver.wait_for(2)[1]
        assert verify_webhook(new, after.headers, after.body).business_id == "after"
        with pytest.raises(WebhookVerificationError):
            verify_webhook(old, after.headers, after.body)

    page.reload()  # shown once: gone from the page
    expect(page.locator("#application-table")).to_be_visible()
    assert new not in page.content() and old not in page.content()
    page.click("#logout")
    login(page, server, token=READER, where="#applications")
    signed.get_by_role("button", name="Edit").click()
    form = page.locator("#edit-application")
    for name in ("max_pending", "webhook_url", "webhook_timeout_s"):
        expect(form.locator(f"input[name={name}]")).to_be_disabled()
    expect(form.locator("select[name=channel]")).to_be_disabled()
    expect(form.locator("input[name=webhook_url]")).to_have_value(
        receiver.url().removesuffix("/hook") + "/***"
    )
    expect(page.locator("#webhook-secret input[name=overlap_s]")).to_be_disabled()
    expect(page.locator("#rotate-secret")).to_be_disabled()


def test_the_console_works_behind_a_reverse_proxy_under_a_path_prefix(
    page: Page, server: ConsoleServer
):
    """The proxy serves the server under /clock and passes the client's Host on; every URL
    the browser asks for must be under the prefix (the proxy answers 404 to any other)."""
    server.api("PUT", "/v1/applications/proxied", json={"retry_max": 4})
    with reverse_proxy(server.base_url, "/clock") as proxy:
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        page.goto(f"{proxy}/clock/console#overview")  # redirected to /clock/console/
        expect(page).to_have_url(f"{proxy}/clock/console/#overview")
        page.fill("#token", ADMIN)
        page.click("#login button[type=submit]")
        expect(page.locator("#card-database .value")).to_have_text("ok")
        expect(page.locator("#by-application tr[data-application=orders]")).to_be_visible()

        page.click("#nav a[data-page=search]")
        page.fill("#search-form input[name=application]", "orders")
        page.fill("#search-form input[name=business_id]", "o-07")
        page.click("#search-form button[type=submit]")
        page.locator("#alarm-table tbody tr td:nth-child(2) a").click()
        expect(page.locator("#fields tr[data-field=business_id] td").nth(1)).to_have_text("o-07")

        page.click("#nav a[data-page=applications]")
        proxied = page.locator("#application-table tr[data-application=proxied]")
        proxied.get_by_role("button", name="Edit").click()
        page.fill("#edit-application input[name=retry_max]", "6")
        page.click("#edit-application button[type=submit]")
        confirm(page)  # a PATCH with the proxy's Origin: served, as the Host is passed on
        expect(page.locator("#flash")).to_have_text("Saved the settings of proxied.")
        assert server.api("GET", "/v1/applications/proxied")["retry_max"] == 6

        assert asked and all(url.startswith(f"{proxy}/clock/") for url in asked), asked
        assert any("/clock/v1/overview" in url for url in asked)
        assert any("/clock/console/static/main.js" in url for url in asked)
        # Its icon is named by the page, under the prefix, so no browser asks for /favicon.ico.
        icon = page.evaluate("document.querySelector('link[rel=icon]').href")
        assert icon == f"{proxy}/clock/console/static/icon.svg"
        answer = requests.get(icon, timeout=10)
        assert answer.status_code == 200
        assert answer.headers["Content-Type"].startswith("image/svg+xml")


def test_the_pull_consumers_time_to_ack_is_shown_apart(page: Page, server: ConsoleServer):
    server.api("PUT", "/v1/applications/jobs", json={"channel": "pull"})
    server.step(server.clock.now_ms() + 3000)  # the engine reads the registry again
    due = server.clock.now_ms() + 100
    server.create("jobs", "job-1", "work", target_ring_at=due)
    server.step(due)  # handed to the pullers
    pulled = server.api("POST", "/v1/applications/jobs/pull", json={"max": 10})["messages"]
    assert len(pulled) == 1
    server.clock.set(due + 250)
    acked = server.api("POST", "/v1/applications/jobs/ack", json={"ids": [pulled[0]["id"]]})
    assert len(acked["acked"]) == 1
    server.step()
    login(page, server)
    expect(page.locator("#pull-ack-title")).to_contain_text("Pull consumers' time to ack")
    expect(page.locator("#card-pull-sample .value")).to_have_text("1")
    expect(page.locator("#card-pull-p50 .value")).to_have_text("250 ms")
    expect(page.locator("#card-p50 .value")).not_to_have_text("250 ms")  # the engine's
    expect(page.locator('#stats .chart-group[data-application="jobs"]')).to_be_visible()


def test_a_minute_with_rings_between_minutes_without_is_marked_on_the_chart(
    page: Page, server: ConsoleServer
):
    # Last in the module: its application would be one more in the lists above.
    server.bind("sporadic")
    due = server.clock.now_ms() + 100
    server.create("sporadic", "once", "alone", target_ring_at=due)
    server.step(due)
    login(page, server)
    group = page.locator('#stats .chart-group[data-application="sporadic"]')
    line = group.locator("figure[data-chart=lateness] path.line[data-series=lateness_p99_ms]")
    expect(line).to_have_attribute("d", re.compile(r"^M[\d.]+,[\d.]+$"))  # one point, no line
    mark = group.locator("figure[data-chart=lateness] circle.point[data-series=lateness_p99_ms]")
    expect(mark).to_have_count(1)
    expect(mark).to_be_visible()
    box = mark.bounding_box()
    assert box is not None and box["width"] > 0 and box["height"] > 0


def test_the_busiest_applications_are_charted_and_any_other_by_name(
    page: Page, server: ConsoleServer
):
    # Last in the module, after the sporadic one: 25 more applications with statistics.
    for n in range(25):
        server.create(f"many-{n:02d}", "one", "far", target_ring_at=NOW + 30 * MIN)
    server.step()
    answer = server.api("GET", "/v1/stats?minutes=60")
    assert len(answer["applications"]) == 20 and answer["left_out"] > 0
    assert "many-24" not in answer["applications"]  # ties by name: the last is left out
    login(page, server)
    groups = page.locator("#stats .chart-group")
    expect(groups).to_have_count(1 + 20)
    expect(page.locator("#stats-left-out")).to_have_text(
        re.compile(rf"^{answer['left_out']} more applications are counted in All applications")
    )
    page.fill("#chart-form input[name=application]", "many-24")
    page.click("#chart-form button[type=submit]")
    expect(page).to_have_url(re.compile(r"#overview\?chart=many-24$"))
    expect(page.locator('#stats .chart-group[data-application="many-24"]')).to_be_visible()
    expect(groups).to_have_count(1 + 21)
    expect(page.locator("#chart-form input[name=application]")).to_have_value("many-24")


def test_a_ring_days_late_reads_over_the_last_bucket(page: Page, server: ConsoleServer):
    # Last in the module: the overview's lateness is then days for what follows.
    server.bind("sporadic")
    now = server.clock.now_ms()
    days_ago = now - 3 * 24 * 60 * MIN
    server.create(
        "sporadic", "days-late", "late", target_ring_at=days_ago, latest_ring_at=now + MIN
    )
    server.step(now + 1000)
    assert server.api("GET", "/v1/alarms/sporadic/days-late")["status"] == "rung"
    assert server.api("GET", "/v1/overview")["lateness"]["over_max"] is True
    login(page, server)
    expect(page.locator("#card-max .value")).to_have_text("over 1 d")  # not "1 d": 3 days


def test_schedules_show_their_next_occurrences_pause_resume_and_their_history(
    page: Page, server: ConsoleServer, shots: Path
):
    t0 = server.clock.now_ms()
    weekly = {"cron": "0 9 * * MON", "timezone": "Europe/Berlin", "payload": "weekly report"}
    server.api("PUT", "/v1/schedules/reports/weekly", json=weekly)
    server.api("PUT", "/v1/schedules/reports/tick",
               json={"every_s": 60, "start_at": t0, "payload": "tick"})  # fmt: skip
    coming = server.api("GET", "/v1/schedules/reports/weekly/next?count=3")["occurrences"]
    login(page, server, where="#schedules")
    row = page.locator("#schedule-table tr[data-schedule=weekly]")
    expect(row.locator("td[data-field=calendar]")).to_have_text("0 9 * * MON")
    expect(row.locator("td[data-field=next] li")).to_have_count(3)
    first = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(coming[0]["at"] / 1000))
    expect(row.locator("td[data-field=next] li").first).to_contain_text(first)
    expect(row.locator("td[data-field=next] li").first).to_contain_text("09:00 Europe/Berlin")
    page.screenshot(path=shots / "schedules.png", full_page=True)

    tick = page.locator("#schedule-table tr[data-schedule=tick]")
    tick.get_by_role("button", name="Pause").click()
    expect(page.locator("#confirm-text")).to_contain_text("Pause tick of reports?")
    confirm(page)
    expect(page.locator("#flash")).to_have_text("Paused tick of reports.")
    expect(tick.locator("td[data-field=state]")).to_have_text("paused")
    assert server.api("GET", "/v1/schedules/reports/tick")["paused"] is True
    tick.get_by_role("button", name="Resume").click()
    confirm(page)
    expect(tick.locator("td[data-field=state]")).to_have_text("active")

    # An occurrence made and rung, found from the schedule's row.
    server.bind("reports")
    planner = server.runtime.maintenance.planner
    assert planner is not None
    server.step(t0 + 50_000)
    assert planner.run() is not None  # makes the occurrence of t0 + 60 s, ahead of it
    server.step(t0 + 60_000)
    key = occurrence_key("tick", t0 + 60_000)
    assert server.api("GET", f"/v1/alarms/reports/{key}")["status"] == "rung"
    page.reload()
    page.locator("#schedule-table tr[data-schedule=tick]").get_by_role(
        "link", name="Occurrences"
    ).click()
    expect(page.locator("#results")).to_contain_text(key)


def test_a_read_only_token_sees_schedules_and_cannot_pause_them(page: Page, server: ConsoleServer):
    server.api("PUT", "/v1/schedules/reports/nightly", json={"cron": "0 2 * * *", "payload": "p"})
    login(page, server, token=READER, where="#schedules")
    row = page.locator("#schedule-table tr[data-schedule=nightly]")
    expect(row.get_by_role("button", name="Pause")).to_be_disabled()
