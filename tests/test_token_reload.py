"""CLOCK_TOKENS_FILE read again while serving: on a change of the file and on SIGHUP, in one
process and with several web processes; a bad file keeps the tokens in force; a rotation
with two tokens for one application during the change."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest
import requests

from clock_server.api.tokens import LiveTokens, hashed_form, load_tokens
from clock_server.runtime.token_reload import TokenReloads
from tests.support import ServerProcess, eventually

OLD = "orders-old-token-0123456789"
NEW = "orders-new-token-9876543210"
ADMIN = "admin-token-0123456789abc="
SECRETS = (OLD, NEW, ADMIN)


def write(path: Path, *entries: str) -> None:
    path.write_text("".join(f"{entry}\n" for entry in entries))


def reloads_of(path: Path) -> TokenReloads:
    reloads = TokenReloads(str(path), LiveTokens(load_tokens("", str(path))))
    reloads.run_once()  # the first look reads once more; nothing changed
    return reloads


def test_a_rotation_with_two_tokens_for_one_application(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    write(path, f"{OLD}=orders", f"{ADMIN}=*")
    reloads = reloads_of(path)
    tokens = reloads.tokens
    assert tokens.lookup(OLD) is not None and tokens.lookup(NEW) is None
    write(path, f"{OLD}=orders", f"{hashed_form(NEW)}=orders", f"{ADMIN}=*")  # both, a while
    assert reloads.run_once()
    assert tokens.lookup(OLD) is not None and tokens.lookup(NEW) is not None
    write(path, f"{hashed_form(NEW)}=orders", f"{ADMIN}=*")  # every client has the new one
    assert reloads.run_once()
    assert tokens.lookup(OLD) is None
    grant = tokens.lookup(NEW)
    assert grant is not None and grant.allows("orders") and not grant.allows("billing")
    assert not reloads.run_once()  # unchanged since


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "holds no token"),
        (f"{NEW}=orders\nbroken line\n", "CLOCK_TOKENS_FILE line 2"),
        ("aaaaaaaaaaaaaaaaaaaa=orders\n", "6 different characters"),
        (None, "cannot be read"),
    ],
)
def test_a_bad_file_keeps_the_tokens_in_force_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str | None, message: str
) -> None:
    path = tmp_path / "tokens"
    write(path, f"{OLD}=orders")
    reloads = reloads_of(path)
    if content is None:
        path.unlink()
    else:
        path.write_text(content)
    with caplog.at_level(logging.INFO, logger="clock_server.runtime.token_reload"):
        assert not reloads.run_once()
    assert reloads.tokens.lookup(OLD) is not None
    (record,) = caplog.records
    assert record.levelno == logging.ERROR and record.action == "tokens_reload_failed"  # type: ignore[attr-defined]
    assert message in record.getMessage() and "the 1 in force stay" in record.getMessage()
    assert not any(secret in caplog.text for secret in SECRETS)
    write(path, f"{NEW}=orders")  # mended: taken at the next look
    assert reloads.run_once() and reloads.tokens.lookup(NEW) is not None


def test_a_reload_asked_for_reads_the_file_even_when_it_looks_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    write(path, f"{OLD}=orders")
    reloads = reloads_of(path)
    stat = path.stat()
    write(path, f"{NEW}=orders")  # the same size; the old times put back
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    if path.stat().st_ino == stat.st_ino:
        assert not reloads.run_once()
        assert reloads.tokens.lookup(OLD) is not None
    reloads.request()
    reloads.run_once()
    assert reloads.tokens.lookup(NEW) is not None and reloads.tokens.lookup(OLD) is None


def test_without_a_file_there_is_nothing_to_reload(caplog: pytest.LogCaptureFixture) -> None:
    tokens = LiveTokens(load_tokens(f"{OLD}=orders", ""))
    reloads = TokenReloads("", tokens)
    reloads.start()  # no thread
    with caplog.at_level(logging.INFO, logger="clock_server.runtime.token_reload"):
        reloads.request()
    assert "nothing to read again" in caplog.text
    reloads.stop()
    assert tokens.lookup(OLD) is not None


def test_the_thread_takes_a_change_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    write(path, f"{OLD}=orders")
    reloads = TokenReloads(str(path), LiveTokens(load_tokens("", str(path))), interval_s=0.05)
    reloads.start()
    try:
        write(path, f"{NEW}=orders")
        eventually(lambda: reloads.tokens.lookup(NEW) is not None, 30, 0.05)
        assert reloads.tokens.lookup(OLD) is None
    finally:
        reloads.stop()


# --- a real server ----------------------------------------------------------------------------


def status(server: ServerProcess, token: str) -> int:
    # A new connection each time, so that with several web processes each is asked.
    url = server.base_url + "/v1/alarms?application=orders"
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    return requests.get(url, headers=headers, timeout=5).status_code


def created(server: ServerProcess, token: str, business_id: str) -> int:
    """A create with a body: the server's I/O thread looks at its token before reading it."""
    body = {"application": "orders", "business_id": business_id, "payload": "p", "delay_ms": 60_000}
    headers = {"Authorization": f"Bearer {token}", "Connection": "close"}
    url = server.base_url + "/v1/alarms"
    return requests.post(url, json=body, headers=headers, timeout=5).status_code


def all_answer(server: ServerProcess, token: str, code: int, tries: int = 12) -> bool:
    return all(status(server, token) == code for _ in range(tries))


def reloads_logged(log: Path) -> int:
    return log.read_text().count("tokens reloaded from CLOCK_TOKENS_FILE")


@pytest.mark.process
@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_a_server_reloads_its_tokens_file_on_sighup_and_on_change(
    tmp_path: Path, web_processes: str
) -> None:
    tokens = tmp_path / "tokens"
    write(tokens, f"{OLD}=orders", f"{ADMIN}=*")
    env = {
        "CLOCK_DATABASE_URL": f"sqlite:///{tmp_path / 'clock.db'}",
        "CLOCK_RUN_ENGINE": "false",
        "CLOCK_TOKENS_FILE": str(tokens),
        "CLOCK_TOKENS": "",
        "CLOCK_WEB_PROCESSES": web_processes,
    }
    log = tmp_path / "server.log"
    server = ServerProcess(env, log)
    workers = int(web_processes)
    try:
        server.start(timeout_s=60)  # web processes start slowly on a busy machine
        assert all_answer(server, OLD, 200) and all_answer(server, NEW, 401)
        # The rotation begins: both tokens of orders, the file changed (no signal).
        write(tokens, f"{OLD}=orders", f"{hashed_form(NEW)}=orders", f"{ADMIN}=*")
        eventually(lambda: reloads_logged(log) == workers, 30, 0.05)
        assert all_answer(server, OLD, 200) and all_answer(server, NEW, 200)
        assert [created(server, NEW, f"new-{n}") for n in range(6)] == [201] * 6
        # A bad file on SIGHUP: the server lives on with the tokens in force.
        tokens.write_text("broken line\n")
        assert server.process is not None
        server.process.send_signal(signal.SIGHUP)
        eventually(lambda: log.read_text().count("tokens not reloaded") >= workers, 30, 0.05)
        assert server.process.poll() is None
        assert all_answer(server, OLD, 200) and all_answer(server, NEW, 200)
        # The rotation ends: the old token removed, then SIGHUP.
        write(tokens, f"{hashed_form(NEW)}=orders", f"{ADMIN}=*")
        server.process.send_signal(signal.SIGHUP)
        eventually(lambda: reloads_logged(log) == 2 * workers, 30, 0.05)
        assert all_answer(server, OLD, 401) and all_answer(server, NEW, 200)
        assert server.process.poll() is None
        assert server.terminate() == 0
    finally:
        server.ensure_stopped()
    text = log.read_text()
    assert not any(secret in text for secret in SECRETS)
