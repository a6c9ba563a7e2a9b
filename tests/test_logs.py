"""The log as an operator reads it: text or JSON lines, each with its action; request ids and
access lines; pika's own records kept below WARNING; broker connections named apart."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest

from clock_server.api import create_app
from clock_server.api.tokens import load_tokens
from clock_server.broker.connection_log import ConnectionLog, describe
from clock_server.broker.dead_letter_publisher import AmqpDeadLetterPublisher
from clock_server.log_context import REQUEST_ID
from clock_server.metrics import Metrics
from clock_server.model import DeadLetter
from clock_server.runtime import cli
from clock_server.runtime.build_api import build_services
from clock_server.runtime.logs import log_handler
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.api_support import body
from tests.support import free_port

ORDERS = "orders-token-0123456789"
ADMIN = "admin-token-0123456789abc="
NEW_ID = re.compile(r"[0-9a-f]{32}")


@contextmanager
def written(level: str = "INFO", log_format: str = "json") -> Iterator[io.StringIO]:
    """What the process's handler writes, at `level`, while the block runs."""
    stream = io.StringIO()
    handler = log_handler(level, log_format, stream)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """Every line written, each parsed as one JSON object that has an action."""
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(isinstance(line, dict) and line.get("action") for line in lines), lines
    return lines


# --- the formats ---------------------------------------------------------------------------


def test_a_json_line_has_the_fields_and_the_extra_of_its_record() -> None:
    logger = logging.getLogger("clock_server.engine.test_logs")
    with written() as stream:
        logger.warning("lost %d", 3, extra={"action": "thing_lost", "connection": "c1"})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed", extra={"action": "thing_failed"})
    lost, failed = json_lines(stream)
    assert lost["message"] == "lost 3" and lost["action"] == "thing_lost"
    assert (lost["level"], lost["logger"], lost["connection"]) == (
        "WARNING", "clock_server.engine.test_logs", "c1")  # fmt: skip
    assert lost["process"] == os.getpid()
    assert lost["thread"] and re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", lost["time"]
    )
    assert "ValueError: boom" in failed["exc_info"]


def test_a_text_line_shows_its_action_and_fields() -> None:
    logger = logging.getLogger("clock_server.engine.test_logs")
    with written(log_format="text") as stream:
        logger.warning("lost", extra={"action": "thing_lost", "node": "h:1", "reason": "a b"})
    (line,) = stream.getvalue().splitlines()
    assert " WARNING clock_server.engine.test_logs [" in line
    assert line.endswith('] action=thing_lost lost node=h:1 reason="a b"'), line


def test_a_library_record_gets_the_action_library() -> None:
    with written() as stream:
        logging.getLogger("waitress.queue").warning("Task queue depth is 3")
    (line,) = json_lines(stream)
    assert (line["action"], line["logger"]) == ("library", "waitress.queue")


def test_a_record_made_while_a_request_is_served_carries_its_id() -> None:
    logger = logging.getLogger("clock_server.store.test_logs")
    token = REQUEST_ID.set("req-1")
    try:
        with written() as stream:
            logger.info("inside", extra={"action": "inside"})
            logging.getLogger("sqlalchemy.pool").warning("a library's")
    finally:
        REQUEST_ID.reset(token)
    with written() as stream_after:
        logger.info("outside", extra={"action": "outside"})
    assert [line["request_id"] for line in json_lines(stream)] == ["req-1", "req-1"]
    assert "request_id" not in json_lines(stream_after)[0]


@pytest.mark.parametrize("name", ["pika.adapters.utils.io_services_utils", "pika.connection"])
def test_a_pika_error_does_not_reach_warning_output(name: str) -> None:
    pika_logger = logging.getLogger(name)
    for level in ("INFO", "WARNING"):
        with written(level) as stream:
            pika_logger.error("Socket failed: ConnectionResetError")
            pika_logger.critical("Connection workflow failed")
        assert stream.getvalue() == ""
    with written("DEBUG") as stream:
        pika_logger.error("Socket failed: ConnectionResetError")
    (line,) = json_lines(stream)
    assert (line["level"], line["library_level"], line["action"]) == ("DEBUG", "ERROR", "library")


def test_clock_records_are_not_demoted() -> None:
    with written("WARNING") as stream:
        logging.getLogger("clock_server.broker.amqp_publisher").error(
            "x", extra={"action": "publish_error"}
        )
    assert [line["level"] for line in json_lines(stream)] == ["ERROR"]


def test_a_bad_log_format_stops_the_start_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLOCK_LOG_FORMAT", "xml")
    assert cli.main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "bad configuration: CLOCK_LOG_FORMAT must be text or json, not 'xml'" in err


def test_with_json_a_refused_start_is_a_json_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("CLOCK_TOKENS", "CLOCK_TOKENS_FILE", "CLOCK_ALLOW_UNAUTHENTICATED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLOCK_LOG_FORMAT", "json")
    monkeypatch.setenv("CLOCK_HOST", "0.0.0.0")  # no tokens: refused before anything starts
    monkeypatch.setenv("CLOCK_DATABASE_URL", "sqlite:////nonexistent/dir/clock.db")
    root = logging.getLogger()
    level = root.level
    try:
        assert cli.main(["serve"]) == 2
    finally:
        root.setLevel(level)
    (refused,) = [r for r in caplog.records if getattr(r, "action", None) == "bad_configuration"]
    assert refused.levelno == logging.ERROR and "CLOCK_HOST='0.0.0.0'" in refused.getMessage()


# --- broker connections --------------------------------------------------------------------


def test_a_reason_is_never_empty() -> None:
    assert describe(ConnectionResetError()) == "ConnectionResetError"
    assert describe(ConnectionResetError(104, "reset")) == "ConnectionResetError: [Errno 104] reset"
    assert describe("") == "no reason given"
    assert describe(None) == "no reason given"
    try:
        pika.BlockingConnection(pika.URLParameters(f"amqp://127.0.0.1:{free_port()}/%2F"))
    except pika.exceptions.AMQPConnectionError as error:
        refused = describe(error)
    assert refused.startswith("AMQPConnectionError: (") and "ConnectionRefusedError" in refused


def test_a_connection_logs_each_change_of_state_once() -> None:
    now = [10.0]
    connection = ConnectionLog("clock-publisher-express", lambda: now[0])
    with written("DEBUG") as stream:
        connection.failed("h1:5672", ConnectionRefusedError())  # never up: cannot connect
        connection.failed("h2:5672", ConnectionRefusedError())
        connection.connected("h2:5672")
        connection.connected("h2:5672")  # already up: nothing to say
        connection.failed("h2:5672", OSError("gone"))
        for _ in range(3):
            now[0] += 1.5
            connection.retrying("h1:5672", 0.5)
            connection.failed("h1:5672", ConnectionRefusedError())
        connection.connected("h1:5672")
    lines = json_lines(stream)
    said = [
        (line["level"], line["action"], line["node"]) for line in lines if line["level"] != "DEBUG"
    ]
    assert said == [
        ("WARNING", "broker_disconnected", "h1:5672"),
        ("INFO", "broker_connected", "h2:5672"),
        ("WARNING", "broker_disconnected", "h2:5672"),
        ("INFO", "broker_reconnected", "h1:5672"),
    ]
    assert {line["connection"] for line in lines} == {"clock-publisher-express"}
    lost = next(line for line in lines if line["message"].endswith("gone"))
    assert lost["reason"] == "OSError: gone" and "lost its connection" in lost["message"]
    back = lines[-1]
    assert (back["down_s"], back["failed_attempts"]) == (4.5, 3)
    debug = {line["action"] for line in lines if line["level"] == "DEBUG"}
    assert debug == {"broker_connect_failed", "broker_reconnecting"}


def test_dead_letters_find_the_broker_away_once_per_outage() -> None:
    port = free_port()
    publisher = AmqpDeadLetterPublisher(f"amqp://guest:guest@127.0.0.1:{port}/%2F", "clock.dead")
    letter = DeadLetter(1, 7, "orders", "b1", "p", 0, None, 5, 3, "nacked")
    with written("DEBUG") as stream:
        for _ in range(3):
            assert publisher.publish_dead([letter], timeout_s=2.0) == [False]
    lines = [line for line in json_lines(stream) if line["logger"].startswith("clock_server")]
    assert [(line["level"], line["action"]) for line in lines] == [
        ("WARNING", "broker_disconnected"),
        ("DEBUG", "broker_connect_failed"),
        ("DEBUG", "broker_connect_failed"),
    ]
    assert {(line["connection"], line["node"]) for line in lines} == {
        ("clock-dead-letters", f"127.0.0.1:{port}")}  # fmt: skip
    assert all("ConnectionRefusedError" in line["reason"] for line in lines)


# --- request ids and access lines ----------------------------------------------------------


@pytest.fixture
def client(store: AlarmStore, fake_clock: SettableClock) -> Any:
    tokens = f"{ORDERS}=orders; {ADMIN}=*"
    settings = Settings(tokens=tokens)
    services = build_services(
        settings,
        store,
        fake_clock,
        Metrics(),
        publisher=InMemoryPublisher(),
        tokens=load_tokens(settings.tokens, settings.tokens_file),
    )
    return create_app(services).test_client()


def _request(client: Any, method: str, url: str, token: str | None = None, **kwargs: Any) -> Any:
    headers = kwargs.pop("headers", {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    # buffered: the answer is closed at once, and its access line written
    return client.open(url, method=method, headers=headers, buffered=True, **kwargs)


def _access(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["action"] == "http_request"]


def test_an_access_line_names_the_route_not_the_path(client: Any) -> None:
    with written() as stream:
        created = _request(client, "POST", "/v1/alarms", ORDERS, json=body(application="orders"))
        got = _request(client, "GET", "/v1/alarms/orders/order-1", ORDERS)
        missing = _request(client, "GET", "/v1/nothing-here", ORDERS)
    assert (created.status_code, got.status_code, missing.status_code) == (201, 200, 404)
    lines = _access(json_lines(stream))
    assert [(line["method"], line["route"], line["status"]) for line in lines] == [
        ("POST", "/v1/alarms", 201),
        ("GET", "/v1/alarms/<application>/<path:business_id>", 200),
        ("GET", None, 404),
    ]
    assert [line["application"] for line in lines] == ["orders", "orders", "orders"]
    assert all(
        isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0 for line in lines
    )
    for response, line in zip((created, got, missing), lines, strict=True):
        assert NEW_ID.fullmatch(response.headers["X-Request-Id"])
        assert line["request_id"] == response.headers["X-Request-Id"]
    assert len({line["request_id"] for line in lines}) == 3
    assert "order-1" not in stream.getvalue()


def test_a_sent_request_id_is_kept_and_on_every_line_of_its_request(client: Any) -> None:
    with written() as stream:
        refused = _request(client, "GET", "/v1/alarms", "not-a-token-0123456789",
                           headers={"X-Request-Id": "trace-42/a:b"})  # fmt: skip
    assert refused.status_code == 401
    assert refused.headers["X-Request-Id"] == "trace-42/a:b"
    lines = json_lines(stream)
    assert {line["action"] for line in lines} == {"request_unauthorized", "http_request"}
    assert {line["request_id"] for line in lines} == {"trace-42/a:b"}


@pytest.mark.parametrize("sent", ["", "has space", "x" * 129, "tab\there", "é", "a\x7f"])
def test_an_unfit_request_id_is_replaced(client: Any, sent: str) -> None:
    with written() as stream:
        answer = _request(client, "GET", "/v1/alarms", ADMIN, headers={"X-Request-Id": sent})
    assert answer.status_code == 200
    assert NEW_ID.fullmatch(answer.headers["X-Request-Id"])
    (line,) = _access(json_lines(stream))
    assert line["request_id"] == answer.headers["X-Request-Id"]


def test_the_longest_request_id_is_kept(client: Any) -> None:
    sent = "x" * 128
    answer = _request(client, "GET", "/v1/alarms", ADMIN, headers={"X-Request-Id": sent})
    assert answer.headers["X-Request-Id"] == sent


def test_the_application_of_a_token_for_one_when_the_request_names_none(client: Any) -> None:
    with written() as stream:
        _request(client, "GET", "/v1/alarms", ORDERS)
        _request(client, "GET", "/v1/alarms", ADMIN)
    assert [line["application"] for line in _access(json_lines(stream))] == ["orders", None]


def test_probes_are_quiet_below_debug_unless_they_fail(client: Any) -> None:
    with written() as stream:
        live = _request(client, "GET", "/livez")
        _request(client, "GET", "/metrics")
    assert live.status_code == 200 and NEW_ID.fullmatch(live.headers["X-Request-Id"])
    assert _access(json_lines(stream)) == []
    with written("DEBUG") as stream:
        _request(client, "GET", "/livez")
    assert [(line["level"], line["route"]) for line in _access(json_lines(stream))] == [
        ("DEBUG", "/livez")]  # fmt: skip
