"""The fault suite: each case runs real servers and breaks one of them on purpose."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import MariaDB, RabbitMQ


@pytest.fixture
def mariadb() -> Iterator[MariaDB]:
    server = MariaDB()
    yield server
    server.start()  # whatever the case did, the next one finds it running


@pytest.fixture
def rabbitmq() -> Iterator[RabbitMQ]:
    broker = RabbitMQ()
    yield broker
    broker.start()
