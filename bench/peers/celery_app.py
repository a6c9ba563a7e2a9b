"""The Celery app the benchmark's worker runs: ``celery -A bench.peers.celery_app worker ...``.

One task, ``bench.peers.record``, which notes when it ran (see :mod:`bench.peers.common`).
The broker URL comes from ``$BENCH_PEERS_BROKER`` (default: local RabbitMQ, guest/guest), the
worker's prefetch multiplier from ``$BENCH_PEERS_CELERY_PREFETCH`` (default 4; 0 = unlimited).
"""

from __future__ import annotations

import os

from celery import Celery

from bench.peers.common import record as _record

BROKER = os.environ.get("BENCH_PEERS_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
PREFETCH_ENV = "BENCH_PEERS_CELERY_PREFETCH"  # worker_prefetch_multiplier; 0 = unlimited

app = Celery("bench_peers", broker=BROKER)
app.conf.update(
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    enable_utc=True,
    timezone="UTC",
    broker_connection_retry_on_startup=True,
    worker_enable_remote_control=False,  # no pidbox queue/exchange left behind
    worker_send_task_events=False,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=int(os.environ.get(PREFETCH_ENV, "4")),
)


@app.task(name="bench.peers.record")
def record(job_id: int, due_ms: float) -> None:
    _record(job_id, due_ms)
