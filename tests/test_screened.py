"""The gate's checks handed to the app: a request whose headers the HTTP server's gate
screened reaches the app saying so (`SCREENED`), and the app then skips only the checks the
gate made. No client can say so itself. A real waitress server in this process, on SQLite."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from clock_server.api.app import create_app
from clock_server.api.request_guard import SCREENED
from clock_server.api.tokens import load_tokens
from clock_server.metrics import Metrics
from clock_server.runtime.build_api import build_services
from clock_server.runtime.http_server import create_http_server
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import stop_waitress

TOKEN = "screened-admin-token-0123456789"
JSON = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
ALARM = {"application": "orders", "payload": "p", "delay_ms": 600_000}


class Served:
    """The app behind waitress, and what the environment of each request it got said."""

    def __init__(self, store: AlarmStore, clock: SettableClock) -> None:
        settings = Settings(tokens=f"{TOKEN}=*", tokens_file="")
        tokens = load_tokens(settings.tokens, settings.tokens_file)
        services = build_services(
            settings, store, clock, Metrics(), publisher=InMemoryPublisher(), tokens=tokens
        )
        self.store = store
        self.app = create_app(services)
        self.screened: list[Any] = []
        inner: Callable[..., Any] = self.app.wsgi_app

        def recorded(environ: dict[str, Any], start_response: Any) -> Any:
            self.screened.append(environ.get(SCREENED))
            return inner(environ, start_response)

        self.app.wsgi_app = recorded  # type: ignore[method-assign]
        listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        self.server = create_http_server(self.app, settings, sockets=[listener])
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def post(self, business_id: str, **headers: str) -> requests.Response:
        return requests.post(self.url + "/v1/alarms", json={**ALARM, "business_id": business_id},
                             headers={**JSON, **headers}, timeout=10)  # fmt: skip


@pytest.fixture
def served(tmp_path: Path, fake_clock: SettableClock) -> Iterator[Served]:
    path = tmp_path / "clock.db"
    db = open_database(f"sqlite:///{path}")
    migrate.upgrade(db)
    served = Served(AlarmStore(db), fake_clock)
    try:
        yield served
    finally:
        stop_waitress(served.server, served.thread)
        db.dispose()


def test_a_create_the_gate_screened_says_so_and_is_served(served: Served) -> None:
    assert served.post("a").status_code == 201
    assert served.screened == [True]


def test_what_the_gate_refuses_is_refused_without_the_mark(served: Served) -> None:
    assert served.post("b", Origin="https://evil.example").status_code == 403
    assert served.post("c", Authorization="Bearer wrong-token-0123456789").status_code == 401
    assert served.screened == [None, None]  # the app answered from the headers, unscreened


def test_no_header_can_claim_the_mark(served: Served) -> None:
    for name in ("Clock-Screened", "clock.screened", "Clock_Screened"):
        response = requests.get(served.url + "/v1/alarms?application=orders",
                                headers={**JSON, name: "true"}, timeout=10)  # fmt: skip
        assert response.status_code == 200
    assert served.screened == [None, None, None]


def test_the_app_skips_only_the_checks_the_mark_stands_for(
    served: Served, fake_clock: SettableClock
) -> None:
    """Without the mark (a bodiless request, the test client, another server) the app makes
    every check itself; with it, it skips the Host, Origin and body checks alone."""
    tokens = load_tokens("", "")
    services = build_services(
        Settings(),
        served.store,
        fake_clock,
        Metrics(),
        publisher=InMemoryPublisher(),
        tokens=tokens,
    )
    client = create_app(services).test_client()
    body = {**ALARM, "business_id": "d"}
    foreign = {"Host": "evil.example"}
    assert client.post("/v1/alarms", json=body, headers=foreign).status_code == 421
    marked = client.post("/v1/alarms", json=body, headers=foreign,
                         environ_base={SCREENED: True})  # fmt: skip
    assert marked.status_code == 201
    bad_query = client.get("/v1/alarms?application=a&application=b", environ_base={SCREENED: True})
    assert bad_query.status_code == 400  # the query's check is the app's alone
