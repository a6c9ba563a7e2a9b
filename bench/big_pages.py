"""One application's list pages as large as its alarms can make them: how big each answer is,
how much the server holds, and how fast another application's reads stay meanwhile.

    python -m bench.big_pages                      # this checkout's code
    PYTHONPATH=/tmp/clock-old python -m bench.big_pages   # another revision's (bench.ab way)

1,000 alarms of application `greedy` with 64 KiB payloads of control characters (JSON writes
each byte as six: `\\u0001`), and 20 small ones of `other`, on MariaDB. Then:
- `one_reader`: one client pages through `greedy` with limit=1000;
- `four_readers`: four clients at once do the same while a fifth reads `other` every 50 ms;
- `stalled_readers`: 34 connections each ask for a page of 53 alarms (20 MB before the byte
  cap) and never read the answer; after 5 s, the server's memory and another read.
Prints a JSON summary: pages, answer sizes, seconds, the server's resident memory (now and
peak) after each phase, and the other application's read latencies.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import requests

from bench.clockserver import BenchServer
from bench.stats import percentile

PAYLOAD_BYTES = 65_536
GREEDY = 1_000
STALLED = 34
STALLED_LIMIT = 53  # 53 alarms of 394 KiB each: about 20 MB without the byte cap


def _fill(base_url: str) -> float:
    """Create the alarms; seconds it took for `greedy`'s."""
    started = time.monotonic()
    payload = "\x01" * PAYLOAD_BYTES
    with requests.Session() as session:
        for start in range(0, GREEDY, 40):  # 40 escaped alarms fit a 16 MiB batch
            items: list[dict[str, Any]] = [
                {"application": "greedy", "business_id": f"k{i:05}", "payload": payload,
                 "delay_ms": 3_600_000}
                for i in range(start, min(start + 40, GREEDY))
            ]  # fmt: skip
            answer = session.post(
                base_url + "/v1/alarms/batch", json={"alarms": items}, timeout=120
            )
            assert answer.status_code == 200, answer.text[:300]
        took_s = time.monotonic() - started
        others: list[dict[str, Any]] = [{"application": "other", "business_id": f"o{i}", "payload": "p",
                  "delay_ms": 3_600_000} for i in range(20)]  # fmt: skip
        session.post(base_url + "/v1/alarms/batch", json={"alarms": others}, timeout=60)
    return took_s


def _page_through(base_url: str, sizes: list[int]) -> int:
    """Every alarm of `greedy`, page by page; how many alarms. Each answer's size in `sizes`."""
    cursor, alarms = "", 0
    with requests.Session() as session:
        while True:
            query = {"application": "greedy", "limit": "1000", "cursor": cursor}
            answer = session.get(base_url + "/v1/alarms", params=query, timeout=600)
            sizes.append(len(answer.content))
            page = orjson.loads(answer.content)
            alarms += len(page["alarms"])
            cursor = page["next_cursor"]
            if cursor is None:
                return alarms


def _other_reads(base_url: str, stop: threading.Event, took_s: list[float]) -> None:
    with requests.Session() as session:
        while not stop.is_set():
            started = time.monotonic()
            session.get(base_url + "/v1/alarms", params={"application": "other"}, timeout=60)
            took_s.append(time.monotonic() - started)
            stop.wait(0.05)


def _latencies(took_s: list[float]) -> dict[str, Any]:
    ms = sorted(1000 * s for s in took_s)
    if not ms:
        return {"reads": 0}
    return {"reads": len(ms), "p50_ms": round(percentile(ms, 0.50), 1),
            "p99_ms": round(percentile(ms, 0.99), 1), "max_ms": round(ms[-1], 1)}  # fmt: skip


def _memory(server: BenchServer) -> dict[str, int]:
    return {name: round(mb) for name, mb in server.memory_mb().items()}


def _one_reader(server: BenchServer) -> dict[str, Any]:
    sizes: list[int] = []
    started = time.monotonic()
    alarms = _page_through(server.base_url, sizes)
    return {"alarms": alarms, "pages": len(sizes), "largest_answer_mb": round(max(sizes) / 2**20, 1),
            "seconds": round(time.monotonic() - started, 1), **_memory(server)}  # fmt: skip


def _four_readers(server: BenchServer) -> dict[str, Any]:
    stop, other_s = threading.Event(), list[float]()
    sizes: list[list[int]] = [[] for _ in range(4)]
    counts: list[int] = [0] * 4

    def reader(number: int) -> None:
        counts[number] = _page_through(server.base_url, sizes[number])

    watcher = threading.Thread(target=_other_reads, args=(server.base_url, stop, other_s))
    watcher.start()
    time.sleep(0.5)
    quiet = len(other_s)
    readers = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    started = time.monotonic()
    for thread in readers:
        thread.start()
    for thread in readers:
        thread.join()
    took_s = time.monotonic() - started
    stop.set()
    watcher.join()
    return {"alarms_each": counts, "pages_each": [len(s) for s in sizes],
            "largest_answer_mb": round(max(max(s) for s in sizes) / 2**20, 1),
            "seconds": round(took_s, 1), "other_reads": _latencies(other_s[quiet:]),
            **_memory(server)}  # fmt: skip


def _stalled_readers(server: BenchServer) -> dict[str, Any]:
    request = (f"GET /v1/alarms?application=greedy&limit={STALLED_LIMIT} HTTP/1.1\r\n"
               f"Host: 127.0.0.1\r\n\r\n").encode()  # fmt: skip
    sockets = []
    for _ in range(STALLED):
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request)
        sockets.append(sock)
    time.sleep(5)
    held = _memory(server)
    other_s: list[float] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_other_reads, args=(server.base_url, stop, other_s))
    watcher.start()
    time.sleep(2)
    stop.set()
    watcher.join()
    for sock in sockets:
        sock.close()
    return {"connections": STALLED, "limit": STALLED_LIMIT, "held": held,
            "other_reads": _latencies(other_s)}  # fmt: skip


def run() -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="clock-big-pages-"))
    with BenchServer(workdir, run_engine="false") as server:
        idle = _memory(server)
        created_s = _fill(server.base_url)
        return {
            "code": str(server.code_path),
            "idle": idle,
            "created_s": round(created_s, 1),
            "after_creating": _memory(server),
            "one_reader": _one_reader(server),
            "four_readers": _four_readers(server),
            "stalled_readers": _stalled_readers(server),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print(json.dumps(run(), indent=1))


if __name__ == "__main__":
    main()
