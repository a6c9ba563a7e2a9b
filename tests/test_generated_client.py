"""A client generated from the served OpenAPI document by openapi-python-client, at test time,
creates, reads and cancels an alarm on a live server: the document is one a generator takes
whole, and what it says is what the server does."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import unique

PACKAGE = "clock_openapi_client"
CONFIG = f"project_name_override: clock-openapi-client\npackage_name_override: {PACKAGE}\n"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


def generate(document: dict[str, Any], directory: Path) -> str:
    """Generate the client package into `directory`; the generator's output."""
    (directory / "doc.json").write_text(json.dumps(document))
    (directory / "config.yaml").write_text(CONFIG + "post_hooks: []\n")
    done = subprocess.run(
        [str(GENERATOR), "generate", "--path", "doc.json", "--config", "config.yaml",
         "--output-path", PACKAGE, "--meta", "none"],
        cwd=directory, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def client_package(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The client generated from the live server's document, importable while the module's
    tests run."""
    directory = tmp_path_factory.mktemp("generated")
    document = requests.get(live_server.base_url + "/openapi.json", timeout=10).json()
    output = generate(document, directory)
    assert "warning" not in output.lower(), output  # nothing left out
    sys.path.insert(0, str(directory))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(directory))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def _snake(operation_id: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation_id)


def test_the_generator_takes_every_operation(client_package: Any) -> None:
    from clock_server.api.openapi.document import OPERATIONS

    for operation in OPERATIONS:
        module = f"{PACKAGE}.api.{operation.tag}.{_snake(operation.operation_id)}"
        assert callable(importlib.import_module(module).sync_detailed), module


def test_a_generated_client_creates_reads_and_cancels_an_alarm(
    live_server: Any, client_package: Any
) -> None:
    alarms = f"{PACKAGE}.api.alarms"
    create, get, cancel = (
        importlib.import_module(f"{alarms}.{name}")
        for name in ("create_alarm", "get_alarm", "cancel_alarm")
    )
    models = importlib.import_module(f"{PACKAGE}.models")
    application = unique("generated")
    body = models.CreateAlarm(
        application=application, business_id="order-1", payload="close", delay_ms=600_000
    )
    with client_package.Client(base_url=live_server.base_url) as client:
        created = create.sync_detailed(client=client, body=body)
        assert created.status_code == 201, created.content
        alarm = created.parsed
        assert isinstance(alarm, models.Alarm)
        assert (alarm.application, alarm.business_id) == (application, "order-1")
        assert alarm.status == "pending" and alarm.latest_ring_at is None
        assert alarm.target_ring_at == alarm.created_at + 600_000

        again = create.sync_detailed(client=client, body=body)
        assert again.status_code == 200 and again.parsed.id == alarm.id  # the stored one

        read = get.sync(application, "order-1", client=client)
        assert isinstance(read, models.Alarm) and read.to_dict() == alarm.to_dict()

        cancelled = cancel.sync(application, "order-1", client=client)
        assert isinstance(cancelled, models.Alarm)
        assert (cancelled.id, cancelled.status) == (alarm.id, "cancelled")
        assert get.sync(application, "order-1", client=client).status == "cancelled"

        missing = get.sync_detailed(application, "order-2", client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, models.Error)
        assert missing.parsed.error.code == "not_found"
