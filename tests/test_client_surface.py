"""What the SDK covers and how it is shaped: a client method for every route the server
serves, AsyncClockClient with ClockClient's very methods, an AlarmMessage with every field of
the server's message, and a package that imports without its extras."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import clock_client
from clock_client import AsyncClockClient, ClockClient
from clock_client.models import APPLICATION_SETTINGS, AlarmMessage
from clock_server.api import create_app
from clock_server.api.answers.messages import Message
from clock_server.model import POLICY_FIELDS, RingRow, ring_message
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.testing import SettableClock

# Each route the server serves, "METHOD rule" as Flask's url_map has it, and the client
# method that calls it.
ROUTES = {
    "POST /v1/alarms": "create",
    "POST /v1/alarms/batch": "batch_create",
    "GET /v1/alarms": "list_page",
    "GET /v1/alarms/<application>/<path:business_id>": "get",
    "PATCH /v1/alarms/<application>/<path:business_id>": "update",
    "DELETE /v1/alarms/<application>/<path:business_id>": "cancel",
    "POST /v1/alarms/<application>/<path:business_id>/count": "count",
    "GET /v1/alarms/<application>/<path:business_id>/events": "events",
    "POST /v1/alarms/<application>/<path:business_id>/redrive": "redrive",
    "POST /v1/alarms/redrive": "redrive_where",
    "POST /v1/alarms/cancel": "cancel_where",
    "GET /v1/whoami": "whoami",
    "GET /v1/overview": "overview",
    "GET /v1/stats": "stats",
    "GET /v1/applications": "applications",
    "GET /v1/applications/<application>": "application",
    "PUT /v1/applications/<application>": "configure",
    "PATCH /v1/applications/<application>": "configure",
    "GET /v1/applications/<application>/webhook-secret": "webhook_secret",
    "POST /v1/applications/<application>/webhook-secret": "webhook_secret",
    "POST /v1/applications/<application>/pull": "pull",
    "POST /v1/applications/<application>/ack": "ack",
    "PUT /v1/schedules/<application>/<schedule_id>": "schedule",
    "GET /v1/schedules/<application>/<schedule_id>": "get_schedule",
    "PATCH /v1/schedules/<application>/<schedule_id>": "change_schedule",
    "DELETE /v1/schedules/<application>/<schedule_id>": "delete_schedule",
    "POST /v1/schedules/<application>/<schedule_id>/pause": "pause_schedule",
    "POST /v1/schedules/<application>/<schedule_id>/resume": "resume_schedule",
    "GET /v1/schedules/<application>/<schedule_id>/next": "next_occurrences",
    "GET /v1/schedules": "schedules",
    "GET /livez": "live",
    "GET /readyz": "ready",
    "GET /healthz": "health",
    "GET /metrics": "metrics",
    "GET /openapi.json": "openapi",
}
# Not for a program: the console's page and its scripts and styles, for a browser; and
# Flask's own static route, which serves nothing (clock_server has no static folder).
NOT_FOR_A_CLIENT = {
    "GET /console",
    "GET /console/",
    "GET /console/static/<path:filename>",
    "GET /static/<path:filename>",
}


@pytest.fixture
def served(sqlite_url: str) -> Iterator[set[str]]:
    database = open_database(sqlite_url)
    app = create_app(build_services(Settings(), AlarmStore(database), SettableClock()))
    yield {
        f"{method} {rule.rule}"
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    database.dispose()


def test_every_route_the_server_serves_has_a_client_method(served: set[str]) -> None:
    uncovered = sorted(served - set(ROUTES) - NOT_FOR_A_CLIENT)
    assert uncovered == [], (
        f"routes without a client method (add one, and a row of ROUTES): {uncovered}"
    )
    assert sorted(set(ROUTES) - served) == [], "ROUTES lists routes the server no longer serves"
    for client in (ClockClient, AsyncClockClient):
        missing = sorted(name for name in set(ROUTES.values()) if not hasattr(client, name))
        assert missing == [], f"{client.__name__} lacks {missing}"


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if callable(member) and not name.startswith("_")
    }


def test_the_async_client_has_the_sync_client_s_methods_and_signatures() -> None:
    sync, asynchronous = _public_methods(ClockClient), _public_methods(AsyncClockClient)
    assert sorted(sync) == sorted(asynchronous)
    for name, signature in sync.items():
        twin = asynchronous[name]
        assert twin.parameters == signature.parameters, name
        if name == "list":
            assert inspect.isasyncgenfunction(getattr(AsyncClockClient, name))
            assert twin.return_annotation == "Async" + str(signature.return_annotation)
        else:
            assert inspect.iscoroutinefunction(getattr(AsyncClockClient, name)), name
            assert twin.return_annotation == signature.return_annotation, name
    init = inspect.signature(AsyncClockClient.__init__).parameters
    assert init == inspect.signature(ClockClient.__init__).parameters


def test_the_check_sees_a_signature_that_differs() -> None:
    class Sync:
        def get(self, application: str, business_id: str) -> None: ...

    class Async:
        async def get(self, application: str, key: str) -> None: ...

    assert _public_methods(Sync)["get"].parameters != _public_methods(Async)["get"].parameters


CLIENT_ROOT = Path(clock_client.__file__).resolve().parents[1]


def _run_without(blocked: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter in which importing any of `blocked` fails."""
    script = f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(CLIENT_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "needs", "extra"),
    [
        ("Consumer", "pika", "amqp"),
        ("AsyncClockClient", "httpx", "async"),
        ("verify_webhook", "standardwebhooks", "webhooks"),
    ],
)
def test_the_package_imports_without_its_extras(name: str, needs: str, extra: str) -> None:
    code = textwrap.dedent(
        f"""
        import clock_client
        from clock_client import ClockClient, PullConsumer, AlarmMessage
        assert "{needs}" not in [m for m in sys.modules if sys.modules[m] is not None]
        try:
            getattr(clock_client, "{name}")
        except ImportError as error:
            print(error)
        else:
            raise SystemExit("{name} imported without {needs}")
        """
    )
    result = _run_without(["pika", "httpx", "standardwebhooks"], code)
    assert result.returncode == 0, result.stderr
    assert f"needs {needs}" in result.stdout
    assert f"pip install 'clock-alarm-client[{extra}]'" in result.stdout


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        clock_client.no_such_name  # noqa: B018


def test_the_sdk_knows_the_application_settings_the_server_takes() -> None:
    """The SDK cannot import the server, so it keeps its own list: the same names, in order."""
    assert APPLICATION_SETTINGS == POLICY_FIELDS


@pytest.mark.parametrize(
    ("counted_alarm", "message_id"), [(False, "41"), (True, "41-r2")], ids=["time", "count"]
)
def test_an_alarm_message_carries_every_field_of_the_server_s_message(counted_alarm, message_id):
    """Every field the server's message may have (its schema, api/answers/messages.py) is a
    field of AlarmMessage, and a message the server builds arrives in it whole."""
    fields = {field.name for field in dataclasses.fields(AlarmMessage)}
    assert set(Message.__annotations__) <= fields
    row = RingRow(41, "shop", "order-9", "{}", 1_800_000_000_000, None, 1,
                  ring_after_count=3 if counted_alarm else None, counted=3)  # fmt: skip
    body = ring_message(row, 1_800_000_000_007)
    message = AlarmMessage.from_body(body, message_id=message_id, redelivered=False)
    assert {key: getattr(message, key) for key in body} == body
    assert (message.message_id, message.trigger is None) == (message_id, not counted_alarm)
