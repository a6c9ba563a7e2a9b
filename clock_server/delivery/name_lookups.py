"""Host name lookups a webhook call waits for only until its deadline.

`socket.getaddrinfo` cannot be interrupted, and a resolver that does not answer holds its
caller for the resolver's own timeouts (seconds, times its attempts). So each lookup runs on
a small pool of threads, and the call waits for it only as long as it has left: past that it
fails as timed out, and the lookup ends on its own thread. A resolver that hangs can fill the
pool; the calls behind it then wait in its queue, each still only until its own deadline.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

Resolve = Callable[..., list[Any]]  # as socket.getaddrinfo(host, port, family, type)


class LookupTimedOut(Exception):
    """The lookup did not answer within the time the call had left."""


class NameLookups:
    """`addresses` as getaddrinfo gives them (or `resolve`, for tests), within a time limit;
    thread-safe."""

    def __init__(
        self,
        workers: int = 4,
        thread_name: str = "clock-webhook-lookup",
        resolve: Resolve | None = None,
    ) -> None:
        self._resolve = resolve or socket.getaddrinfo
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)

    def addresses(self, host: str, port: int, family: int, within_s: float) -> list[Any]:
        """The host's stream addresses; raises socket.gaierror as getaddrinfo does, and
        LookupTimedOut past `within_s`."""
        try:
            future = self._pool.submit(self._resolve, host, port, family, socket.SOCK_STREAM)
        except RuntimeError as error:  # shut down: the sender is closed
            raise LookupTimedOut("the sender is closed") from error
        try:
            return future.result(timeout=max(within_s, 0.0))
        except FutureTimeout as error:
            future.cancel()
            raise LookupTimedOut(f"no answer within {within_s:.3f} s") from error

    def close(self) -> None:
        """Start no more lookups; one still running ends on its own thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)
