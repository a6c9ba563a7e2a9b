"""How many pulls may wait for messages at once in one web process.

A long poll holds one of the HTTP server's threads while it waits. Without a bound, the
pullers of one application could hold every thread and leave none for any other request.

The slots are shared between applications: one application holds at most a quarter of them
(`per_application`), and one that already holds some may not take the last `reserved` free
ones, which are kept for applications that hold none. So a few busy applications cannot take
every slot: an application's first waiting pull is refused only once every slot is taken,
which needs at least five applications (with the default 32 threads: 8 slots, 2 each).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from clock_server.errors import RateLimited

# At most this share of CLOCK_HTTP_THREADS waits at once; one application, this share of those.
WAITING_SHARE = 4
APPLICATION_SHARE = 4
RETRY_AFTER_S = 1


class LongPollSlots:
    """The waiting pulls of one web process, in all and by application."""

    def __init__(self, http_threads: int) -> None:
        self.total = max(1, http_threads // WAITING_SHARE)
        self.per_application = max(1, self.total // APPLICATION_SHARE)
        self.reserved = self.per_application  # free slots kept for applications holding none
        self._lock = threading.Lock()
        self._all = 0
        self._by_application: dict[str, int] = {}

    @property
    def in_use(self) -> int:
        """How many pulls wait now."""
        with self._lock:
            return self._all

    @contextmanager
    def waiting(self, application: str) -> Iterator[None]:
        """Hold a slot while a pull of `application` waits; RateLimited (429, Retry-After)
        when all slots, or all of the application's, are taken."""
        with self._lock:
            mine = self._by_application.get(application, 0)
            free = self.total - self._all
            if free <= 0 or mine >= self.per_application or (mine and free <= self.reserved):
                raise RateLimited(
                    f"{self._all} pulls already wait in this web process, {mine} of them "
                    f"{application!r}'s; it lets {self.total} wait at once (a quarter of "
                    f"CLOCK_HTTP_THREADS), at most {self.per_application} of one application, "
                    f"and keeps the last {self.reserved} for applications with none waiting: "
                    "pull again after Retry-After, or with a shorter wait_s",
                    retry_after_s=RETRY_AFTER_S,
                    field="wait_s",
                )
            self._all += 1
            self._by_application[application] = mine + 1
        try:
            yield
        finally:
            with self._lock:
                self._all -= 1
                left = self._by_application[application] - 1
                if left:
                    self._by_application[application] = left
                else:
                    del self._by_application[application]
