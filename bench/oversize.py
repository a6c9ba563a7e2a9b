"""Many clients sending bodies at and over the request limits at once: every answer must be a
clear 4xx, never a 5xx, and the web processes' memory is measured against its bound.

    python -m bench.oversize                 # 32 clients for 20 s, 2 web processes
    python -m bench.oversize --clients 32 --seconds 20 --web-processes 2

Each client loops over four kinds of request:
- `declared_over`: a batch whose Content-Length is one byte over CLOCK_BATCH_MAX_BYTES; only
  the head is sent, and the 413 must come without the body;
- `batch_at_limit`: a batch body just under CLOCK_BATCH_MAX_BYTES whose every alarm has a
  payload one byte over CLOCK_PAYLOAD_MAX_BYTES: read and parsed whole, answered 200 with a
  413 per item, nothing stored (the most a request can make the server hold);
- `single_over`: a single create one byte over its body limit: a JSON 413 before it is read;
- `chunked_over`: a chunked batch adding up to more than CLOCK_BATCH_MAX_BYTES.
Prints a JSON summary: answers by kind and status, 5xx and connection errors, and the peak
resident memory of each web process (VmHWM) beside what the settings allow.
"""

from __future__ import annotations

import argparse
import json
import socket
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import requests

from bench.clockserver import BenchServer

PAYLOAD_MAX_BYTES = 65_536
BATCH_MAX_BYTES = 16 * 1024 * 1024
SINGLE_BODY_MAX_BYTES = 6 * PAYLOAD_MAX_BYTES + 16_384
CHUNK = 1024 * 1024


def _batch_at_limit() -> bytes:
    item = {"application": "oversize", "business_id": "b", "payload": "x" * (PAYLOAD_MAX_BYTES + 1),
            "delay_ms": 3_600_000}  # fmt: skip
    one = len(json.dumps(item)) + 2
    count = min((BATCH_MAX_BYTES - 100) // one, 1_000)
    items = [{**item, "business_id": f"b{i}"} for i in range(count)]
    body = json.dumps({"alarms": items}).encode()
    assert len(body) <= BATCH_MAX_BYTES
    return body


def _status_line(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed before the status line")
        data += chunk
    return int(data.split(b" ", 2)[1])


def _declared_over(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = (f"POST /v1/alarms/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {BATCH_MAX_BYTES + 1}\r\n\r\n")  # fmt: skip
        sock.sendall(head.encode())
        return _status_line(sock)


def _chunked_over(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        head = ("POST /v1/alarms/batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
        sock.sendall(head.encode())
        sent = 0
        try:
            while sent <= BATCH_MAX_BYTES:
                sock.sendall(b"%x\r\n" % CHUNK + b" " * CHUNK + b"\r\n")
                sent += CHUNK
            sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed while the body was still coming
        return _status_line(sock)


class Clients:
    def __init__(self, base_url: str, port: int, clients: int, seconds: float) -> None:
        self.base_url = base_url
        self.port = port
        self.clients = clients
        self.seconds = seconds
        self.answers: Counter[tuple[str, int]] = Counter()
        self.items: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._batch = _batch_at_limit()
        self._single = json.dumps({"application": "oversize", "business_id": "s",
                                   "payload": "x" * SINGLE_BODY_MAX_BYTES}).encode()  # fmt: skip

    def run(self) -> None:
        threads = [threading.Thread(target=self._client, args=(n,)) for n in range(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _client(self, number: int) -> None:
        kinds = ["declared_over", "batch_at_limit", "single_over", "chunked_over"]
        session = requests.Session()
        end = time.monotonic() + self.seconds
        turn = number
        while time.monotonic() < end:
            kind = kinds[turn % len(kinds)]
            turn += 1
            try:
                status = self._send(session, kind)
            except (OSError, requests.RequestException) as error:
                with self._lock:
                    self.errors[f"{kind}: {type(error).__name__}"] += 1
                continue
            with self._lock:
                self.answers[(kind, status)] += 1

    def _send(self, session: requests.Session, kind: str) -> int:
        headers = {"Content-Type": "application/json"}
        if kind == "declared_over":
            return _declared_over(self.port)
        if kind == "chunked_over":
            return _chunked_over(self.port)
        if kind == "single_over":
            url, body = self.base_url + "/v1/alarms", self._single
            return session.post(url, data=body, headers=headers, timeout=60).status_code
        response = session.post(self.base_url + "/v1/alarms/batch", data=self._batch,
                                headers=headers, timeout=120)  # fmt: skip
        if response.status_code == 200:
            statuses = Counter(result["status"] for result in response.json()["results"])
            with self._lock:
                self.items.update(statuses)
        return response.status_code


def _web_peaks_mb(server: BenchServer) -> dict[int, float]:
    assert server.process is not None
    peaks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("PPid", "0").strip()) == server.process.pid and "VmHWM" in fields:
            peaks[int(entry.name)] = int(fields["VmHWM"].split()[0]) / 1024
    return peaks


def run(clients: int, seconds: float, web_processes: int, http_threads: int) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="clock-oversize-"))
    settings = {"web_processes": str(web_processes), "http_threads": str(http_threads),
                "run_engine": "false"}  # fmt: skip
    with BenchServer(workdir, **settings) as server:
        idle = _web_peaks_mb(server)
        load = Clients(server.base_url, server.port, clients, seconds)
        started = time.monotonic()
        load.run()
        took_s = time.monotonic() - started
        peaks = _web_peaks_mb(server)
        stored = server.rung_rows("oversize")
    answers = {f"{kind} {status}": count for (kind, status), count in sorted(load.answers.items())}
    return {
        "clients": clients,
        "seconds": round(took_s, 1),
        "web_processes": web_processes,
        "http_threads": http_threads,
        "answers": answers,
        "batch_items_by_status": dict(load.items),
        "server_errors_5xx": sum(n for (_, status), n in load.answers.items() if status >= 500),
        "connection_errors": dict(load.errors),
        "alarms_stored": len(stored),
        "web_rss_idle_peak_mb": {pid: round(mb) for pid, mb in idle.items()},
        "web_rss_peak_mb": {pid: round(mb) for pid, mb in peaks.items()},
        "batch_body_mb": round(len(load._batch) / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--http-threads", type=int, default=32)
    args = parser.parse_args()
    print(json.dumps(run(args.clients, args.seconds, args.web_processes, args.http_threads),
                     indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
