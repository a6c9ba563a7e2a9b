"""The document says what the server does: the schemathesis CLI, run as a new user runs it
against a real clock-server (SQLite, an admin token), with every check, finds no failure.

`st run <server>/openapi.json --checks all`, 40 examples per operation, seeded so that CI
covers the same ground each time. What the run adds to a new user's is in
tests/schemathesis_checks.py (two checks in place of built-in ones whose rule the API departs
from, as its document declares) and tests/schemathesis.toml (a 413 counts as a rejection).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from clock_server.api.openapi import openapi_document
from tests.schemathesis_checks import ALARM, cancelled_stays_cancelled
from tests.support import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
ST = Path(sys.executable).parent / "st"
ADMIN = "fuzz-cli-admin-token-0123456789"
HOOKS = "tests.schemathesis_checks"
SEED = "20261128"
EXAMPLES = "40"  # per operation


def _operations() -> int:
    """The operations st tests: all but GET /openapi.json, the document it loaded."""
    return sum(
        1
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in ("get", "put", "post", "patch", "delete") and path != "/openapi.json"
    )


@pytest.mark.process
@pytest.mark.timeout(300)
def test_schemathesis_run_with_every_check_finds_no_failure(tmp_path: Path) -> None:
    env = {
        "CLOCK_DATABASE_URL": f"sqlite:///{tmp_path / 'clock.db'}",
        "CLOCK_RUN_ENGINE": "false",
        "CLOCK_TOKENS": f"{ADMIN}=*",
        "CLOCK_TOKENS_FILE": "",
    }
    server = ServerProcess(env, tmp_path / "server.log").start()
    try:
        run = subprocess.run(
            [
                str(ST),
                "--config-file",
                str(ROOT / "tests" / "schemathesis.toml"),
                "run",
                f"{server.base_url}/openapi.json",
                "--checks",
                "all",
                # named too, so that the run stops if tests/schemathesis_checks.py did not add them
                "--checks",
                "declared_rules_only,cancelled_stays_cancelled",
                # each replaced by a check of tests/schemathesis_checks.py; the document says why
                "--exclude-checks",
                "positive_data_acceptance,use_after_free",
                "--max-examples",
                EXAMPLES,
                "--seed",
                SEED,
                "--generation-database",
                "none",
                "--header",
                f"Authorization: Bearer {ADMIN}",
                "--no-color",
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT), "SCHEMATHESIS_HOOKS": HOOKS},
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        server.ensure_stopped()
    report = run.stdout + run.stderr
    assert run.returncode == 0, report[-12_000:]
    operations = _operations()
    assert f"Tested: {operations}" in report, report[-3_000:]
    generated = re.search(r"(\d+) generated, (\d+) passed", report)
    assert generated is not None and int(generated[1]) >= operations * int(EXAMPLES), report[
        -3_000:
    ]
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log, log[-3_000:]


def _answer(status: int, body: object) -> SimpleNamespace:
    headers = {"content-type": ["application/json"]}
    return SimpleNamespace(status_code=status, headers=headers, json=lambda: body)


def _request(method: str, path: str = ALARM) -> SimpleNamespace:
    return SimpleNamespace(method=method, operation=SimpleNamespace(path=path))


def test_cancelled_stays_cancelled_fails_on_a_cancelled_alarm_shown_otherwise() -> None:
    check = cancelled_stays_cancelled()
    alarm = {"id": 7, "business_id": "b", "status": "pending"}
    check.after_response(None, _answer(200, alarm), _request("GET"))  # not cancelled yet
    check.after_response(None, _answer(200, {**alarm, "status": "cancelled"}), _request("DELETE"))
    check.after_response(None, _answer(200, {**alarm, "status": "cancelled"}), _request("GET"))
    listed = {"alarms": [{**alarm, "id": 8}, {**alarm, "status": "rung"}]}
    with pytest.raises(AssertionError, match="alarm 7 was cancelled"):
        check.after_response(None, _answer(200, listed), _request("GET", "/v1/alarms"))
