"""The HTTP edge in the app: JSON bodies only, no foreign Origin, a Host served, nosniff, and
/metrics behind a token when asked. What a page of another site can make a browser send must
be refused and change nothing."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clock_server.api.app import create_app
from clock_server.api.request_guard import (
    BODY_LIMITS,
    ENDPOINTS_KEPT,
    PATH_KEPT_CHARS,
    BodyGate,
    HostNames,
    served_hosts,
    split_host,
)
from clock_server.api.tokens import TokenTable, load_tokens
from clock_server.errors import ConfigError
from clock_server.metrics import Metrics
from clock_server.runtime.build_api import build_services
from clock_server.runtime.serve import serve
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.testing import InMemoryPublisher, SettableClock

ADMIN = "guard-admin-token-0123456789"
READER = "guard-reader-token-0123456789"
ORDERS = "guard-orders-token-0123456789"
TOKENS = f"{ADMIN}=*;{READER}=*:read;{ORDERS}=orders"
FORM = "application/x-www-form-urlencoded"


class Edge:
    """The app over a store, with these settings."""

    def __init__(self, store: AlarmStore, clock: SettableClock, **settings: Any) -> None:
        self.settings = Settings(**settings)
        tokens = load_tokens(self.settings.tokens, self.settings.tokens_file)
        services = build_services(
            self.settings, store, clock, Metrics(), publisher=InMemoryPublisher(), tokens=tokens
        )
        self.app = create_app(services)
        self.client = self.app.test_client()
        self.clock = clock

    def create(self, business_id: str, **headers: str) -> Any:
        body = {"application": "orders", "business_id": business_id, "payload": "p",
                "delay_ms": 60_000}  # fmt: skip
        return self.client.post("/v1/alarms", json=body, headers=headers)

    def statuses(self) -> dict[str, str]:
        response = self.client.get("/v1/alarms?application=orders")
        return {a["business_id"]: a["status"] for a in response.get_json()["alarms"]}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("guard") / "clock.db"
    db = open_database(f"sqlite:///{path}")
    migrate.upgrade(db)
    db.dispose()
    return path


@pytest.fixture
def store(migrated: Path, tmp_path: Path) -> Iterator[AlarmStore]:
    """An empty store of its own: a copy of the migrated file."""
    path = Path(shutil.copy(migrated, tmp_path / "clock.db"))
    db = open_database(f"sqlite:///{path}")
    yield AlarmStore(db)
    db.dispose()


@pytest.fixture
def edge(store: AlarmStore, fake_clock: SettableClock) -> Edge:
    return Edge(store, fake_clock)


def _error(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code
    return str(error["message"])


# --- bodies: JSON only ------------------------------------------------------------------------


def test_a_text_plain_form_creates_nothing(edge: Edge) -> None:
    raw = '{"application": "orders", "business_id": "x", "payload": "p", "delay_ms": 1}'
    for content_type in ("text/plain", "text/plain;charset=UTF-8", FORM, "multipart/form-data"):
        response = edge.client.post("/v1/alarms", data=raw, content_type=content_type)
        message = _error(response, 415, "unsupported_media_type")
        assert "application/json" in message and repr(content_type.split(";")[0]) in message
    response = edge.client.post("/v1/alarms", data=raw)  # a body that names no type
    assert "names none" in _error(response, 415, "unsupported_media_type")
    assert edge.statuses() == {}


def test_an_empty_form_cancels_nothing(edge: Edge) -> None:
    assert edge.create("a").status_code == 201
    for content_type in ("text/plain", FORM):
        response = edge.client.post("/v1/alarms/cancel", data=b"", content_type=content_type)
        _error(response, 415, "unsupported_media_type")
        response = edge.client.delete("/v1/alarms/orders/a", content_type=content_type)
        _error(response, 415, "unsupported_media_type")
    assert edge.statuses() == {"a": "pending"}


def test_json_with_a_charset_and_bodiless_changes_are_served(edge: Edge) -> None:
    raw = '{"application": "orders", "business_id": "a", "payload": "p", "delay_ms": 60000}'
    response = edge.client.post(
        "/v1/alarms", data=raw, content_type="application/json; charset=utf-8"
    )
    assert response.status_code == 201
    assert edge.client.delete("/v1/alarms/orders/a").status_code == 200  # no body, no type
    response = edge.client.post("/v1/alarms/orders/a/redrive")  # no body: due now
    assert _error(response, 409, "conflict")  # reached the route: it is cancelled
    assert edge.statuses() == {"a": "cancelled"}


def test_every_route_that_reads_a_body_has_a_limit(edge: Edge) -> None:
    app = edge.client.application
    reading = {
        rule.endpoint
        for rule in app.url_map.iter_rules()
        if rule.methods and rule.methods & {"POST", "PUT", "PATCH"}
    }
    assert reading == set(BODY_LIMITS)


def test_a_declared_length_over_the_route_limit_is_413(edge: Edge) -> None:
    raw = b'{"max": 1}' + b" " * 2_000  # whitespace is JSON; the pull route takes 1 KiB
    response = edge.client.post("/v1/applications/orders/pull", data=raw,
                                content_type="application/json")  # fmt: skip
    assert "over the limit of 1024 (1 KiB)" in _error(response, 413, "payload_too_large")


# --- Origin and Sec-Fetch-Site ----------------------------------------------------------------


def test_a_foreign_origin_is_refused_and_changes_nothing(edge: Edge) -> None:
    for origin in ("http://evil.example", "http://localhost:9999", "null", "http://localhost/x"):
        message = _error(edge.create("x", Origin=origin), 403, "forbidden")
        assert repr(origin) in message
        _error(edge.client.get("/v1/alarms", headers={"Origin": origin}), 403, "forbidden")
    assert edge.statuses() == {}


def test_the_servers_own_origin_is_served(edge: Edge) -> None:
    """Its own Host, by either scheme: behind a proxy that ends TLS, the page is https."""
    assert edge.create("a", Origin="http://localhost").status_code == 201
    assert edge.create("d", Origin="https://localhost").status_code == 201
    assert edge.create("b", Origin="http://localhost:80").status_code == 201
    headers = {"Origin": "http://127.0.0.1:8080", "Host": "127.0.0.1:8080"}
    assert edge.create("c", **headers).status_code == 201


def test_allowed_origins_are_served(store: AlarmStore, fake_clock: SettableClock) -> None:
    edge = Edge(store, fake_clock, allowed_origins="https://clock.example.com, http://ops:81")
    assert edge.create("a", Origin="https://clock.example.com:443").status_code == 201
    assert edge.create("b", Origin="http://ops:81").status_code == 201
    _error(edge.create("c", Origin="http://ops:82"), 403, "forbidden")


def test_a_cross_site_fetch_may_read_but_not_change(edge: Edge) -> None:
    message = _error(edge.create("x", **{"Sec-Fetch-Site": "cross-site"}), 403, "forbidden")
    assert "Sec-Fetch-Site" in message
    assert edge.create("y", **{"Sec-Fetch-Site": "same-origin"}).status_code == 201
    response = edge.client.get("/v1/alarms/orders/y", headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 200
    assert edge.statuses() == {"y": "pending"}


# --- Host ---------------------------------------------------------------------------------------


def test_a_host_not_served_is_421_naming_the_names(edge: Edge) -> None:
    for host in ("rebound.example", "rebound.example:8080", "10.0.0.5"):
        response = edge.create("x", Host=host)
        message = _error(response, 421, "misdirected_request")
        assert repr(host) in message and "127.0.0.1, [::1], localhost" in message
    assert edge.statuses() == {}
    for host in ("localhost", "LOCALHOST:8080", "127.0.0.1:1", "[::1]:8080", "localhost."):
        assert edge.client.get("/v1/alarms", headers={"Host": host}).status_code == 200, host


def test_the_probes_answer_to_any_host(edge: Edge) -> None:
    for probe in ("/livez", "/readyz", "/healthz"):
        response = edge.client.get(probe, headers={"Host": "10.1.2.3:8080"})
        assert response.status_code in (200, 503), probe  # the broker twin may be down
        assert "error" not in (response.get_json() or {})
    _error(edge.client.get("/metrics", headers={"Host": "10.1.2.3"}), 421, "misdirected_request")


def test_which_hosts_are_served_by_default() -> None:
    tokens = load_tokens(TOKENS, "")
    assert served_hosts(Settings(), TokenTable()) == HostNames(
        frozenset({"127.0.0.1", "localhost", "[::1]"})
    )
    assert "[::1]" in str(served_hosts(Settings(host="::1"), TokenTable()))
    assert served_hosts(Settings(host="0.0.0.0"), tokens) == HostNames(None)  # tokens guard
    with pytest.raises(ConfigError, match="CLOCK_ALLOWED_HOSTS") as caught:
        served_hosts(Settings(host="0.0.0.0"), TokenTable())
    assert caught.value.field == "allowed_hosts"
    names = served_hosts(Settings(host="0.0.0.0", allowed_hosts="clock.internal, a:81"), tokens)
    assert names.allows("clock.internal:8080") and names.allows("A:81")
    assert not names.allows("a:82") and not names.allows("localhost")
    assert served_hosts(Settings(allowed_hosts="*"), TokenTable()).allows("anything")
    assert split_host("[::1]:8080") == ("[::1]", "8080")
    assert split_host("Example.COM.") == ("example.com", "")


def test_serve_needs_host_names_off_loopback_without_tokens_before_anything_starts() -> None:
    settings = Settings(
        host="0.0.0.0",
        allow_unauthenticated=True,
        database_url="sqlite:////nonexistent/dir/clock.db",
    )
    with pytest.raises(ConfigError, match="needs CLOCK_ALLOWED_HOSTS"):
        serve(settings)
    with pytest.raises(ConfigError, match="CLOCK_ALLOWED_ORIGINS"):
        serve(Settings(allowed_origins="clock.example.com", database_url=settings.database_url))


def test_bad_allowed_origins_stop_the_server(store: AlarmStore, fake_clock: SettableClock) -> None:
    for bad in ("clock.example.com", "ftp://x", "https://x/path"):
        with pytest.raises(ConfigError, match="CLOCK_ALLOWED_ORIGINS"):
            Edge(store, fake_clock, allowed_origins=bad)


# --- a path prefix from a reverse proxy -----------------------------------------------------------

PREFIX = {"X-Forwarded-Prefix": "/clock"}


def test_an_untrusted_forwarded_prefix_changes_nothing(edge: Edge) -> None:
    """Any client may send the header: without CLOCK_TRUSTED_PROXY_HOPS it is not read."""
    for headers in ({}, PREFIX, {"X-Forwarded-Prefix": "//elsewhere.example"}):
        answer = edge.client.get("/console", headers=headers)
        assert (answer.status_code, answer.headers["Location"]) == (302, "/console/")
    with edge.client.get("/console/", headers=PREFIX) as page:
        assert page.status_code == 200


def test_a_trusted_proxy_prefix_is_where_the_console_redirects(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    edge = Edge(store, fake_clock, trusted_proxy_hops=1)
    answer = edge.client.get("/console", headers=PREFIX)
    assert (answer.status_code, answer.headers["Location"]) == (302, "/clock/console/")
    assert edge.client.get("/console").headers["Location"] == "/console/"  # no proxy: none
    with edge.client.get("/console/", headers=PREFIX) as page:
        assert page.status_code == 200 and b'src="static/main.js"' in page.data


def test_a_trusted_prefix_that_is_not_a_path_is_refused(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    edge = Edge(store, fake_clock, trusted_proxy_hops=1)
    for bad in ("//elsewhere.example", "https://elsewhere.example", "/a/../b", "/a b"):
        answer = edge.client.get("/console", headers={"X-Forwarded-Prefix": bad})
        message = _error(answer, 400, "validation_error")
        assert "X-Forwarded-Prefix" in message and answer.get_json()["error"]["field"] == (
            "X-Forwarded-Prefix"
        )
        assert "Location" not in answer.headers


def test_a_proxy_on_another_port_passes_the_host_with_its_port(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    """The reverse-proxy example of docs/operations.md: nginx's $http_host keeps the port the
    console's Origin names, $host drops it."""
    public = {"Origin": "https://ops.example.com:8443", **PREFIX}
    edge = Edge(store, fake_clock, allowed_hosts="ops.example.com", trusted_proxy_hops=1)
    http_host = {**public, "Host": "ops.example.com:8443"}
    assert edge.create("http-host", **http_host).status_code == 201
    host = {**public, "Host": "ops.example.com"}
    _error(edge.create("host", **host), 403, "forbidden")
    named = Edge(
        store,
        fake_clock,
        allowed_hosts="ops.example.com",
        allowed_origins="https://ops.example.com:8443",
        trusted_proxy_hops=1,
    )
    assert named.create("host-and-origin", **host).status_code == 201


def test_probes_and_metrics_answer_whatever_the_trusted_prefix(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    """They write no path, so a prefix that is not one is no reason to refuse them."""
    edge = Edge(store, fake_clock, trusted_proxy_hops=1)
    bad = {"X-Forwarded-Prefix": "//elsewhere.example"}
    for path in ("/livez", "/readyz", "/healthz", "/metrics", "/openapi.json"):
        with edge.client.get(path, headers=bad) as answer:
            assert answer.status_code in (200, 503), (path, answer.status_code)
            assert "X-Forwarded-Prefix" not in answer.get_data(as_text=True), path
    _error(edge.client.get("/v1/alarms/orders/a", headers=bad), 400, "validation_error")


# --- nosniff and /metrics -----------------------------------------------------------------------


def test_every_answer_says_nosniff(edge: Edge) -> None:
    answers = [
        edge.create("a"),
        edge.client.get("/v1/alarms/orders/missing"),
        edge.client.get("/metrics"),
        edge.client.get("/openapi.json"),
        edge.client.get("/nowhere"),
        edge.client.post("/v1/alarms", data="x", content_type="text/plain"),
        edge.client.get("/console"),
    ]
    for response in answers:
        assert response.headers["X-Content-Type-Options"] == "nosniff", response.status
        response.close()


def test_metrics_can_require_a_token_of_every_application(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    edge = Edge(store, fake_clock, tokens=TOKENS, metrics_token_required=True)
    _error(edge.client.get("/metrics"), 401, "unauthorized")
    orders = {"Authorization": f"Bearer {ORDERS}"}
    message = _error(edge.client.get("/metrics", headers=orders), 403, "forbidden")
    assert "every application" in message
    for token in (ADMIN, READER):
        response = edge.client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200 and b"clock_" in response.data
    assert edge.client.get("/healthz").status_code in (200, 503)  # the probes stay open
    open_metrics = Edge(store, fake_clock, tokens=TOKENS)  # the default: open
    assert open_metrics.client.get("/metrics").status_code == 200
    with pytest.raises(ConfigError, match="needs tokens"):
        Settings(metrics_token_required=True)


# --- the HTTP server's gate: which bodies are not read ----------------------------------------

JSON_HEADERS = {"Host": "localhost", "Content-Type": "application/json"}
GATE_CASES = [
    # method, path, headers, declared length: whether the app answers without the body
    ("POST", "/v1/alarms", JSON_HEADERS, 100, False),
    ("POST", "/v1/alarms", {**JSON_HEADERS, "Content-Type": "text/plain"}, 100, True),
    ("POST", "/v1/alarms", {**JSON_HEADERS, "Host": "evil.example"}, 100, True),
    ("POST", "/v1/alarms", {**JSON_HEADERS, "Origin": "https://evil.example"}, 100, True),
    ("POST", "/v1/alarms", JSON_HEADERS, 10_000_000, True),  # over the route's limit
    ("PATCH", "/v1/alarms/orders/a", JSON_HEADERS, 100, False),
    ("PATCH", "/v1/alarms/orders/" + "b" * PATH_KEPT_CHARS, JSON_HEADERS, 100, False),
    ("GET", "/v1/alarms/orders/a", JSON_HEADERS, 100, True),  # a route that takes no body
    ("POST", "/v1/no-such-route", JSON_HEADERS, 100, True),
    ("DELETE", "/v1/alarms", JSON_HEADERS, 100, True),  # 405
]


@pytest.mark.parametrize(("method", "path", "headers", "length", "unread"), GATE_CASES)
def test_the_gate_reads_a_body_only_when_the_app_will(
    edge: Edge, method: str, path: str, headers: dict[str, str], length: int, unread: bool
) -> None:
    gate = BodyGate.of(edge.app)
    assert gate is not None
    for _ in range(3):  # the first asks the router, the others the endpoints kept
        assert gate.body_unread(method, path, headers.get, length, False) is unread


def test_the_gate_keeps_the_endpoints_of_few_short_paths(edge: Edge) -> None:
    gate = BodyGate.of(edge.app)
    assert gate is not None
    for number in range(ENDPOINTS_KEPT * 2):
        assert not gate.body_unread(
            "PATCH", f"/v1/alarms/orders/{number}", JSON_HEADERS.get, 9, False
        )
    long_path = "/v1/alarms/orders/" + "c" * PATH_KEPT_CHARS
    assert not gate.body_unread("PATCH", long_path, JSON_HEADERS.get, 9, False)
    kept = gate._endpoints.cache_info()
    assert kept.currsize == ENDPOINTS_KEPT
    assert kept.misses == ENDPOINTS_KEPT * 2  # the long path never reached the cache
