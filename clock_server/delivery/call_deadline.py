"""Deadlines for calls that block on sockets: one thread ends each call at its deadline.

A socket's timeout bounds one operation (a connect, a recv), not a call: a peer that sends a
byte every 0.1 s never lets a 1 s timeout fire, however long the call takes. `CallDeadlines`
keeps the calls in flight in a heap by deadline and sleeps on a Condition until the earliest
one. At a call's deadline it interrupts what the call holds (`Interruptible`: for a
connection, its socket shut down, which makes a blocked read or write return at once) and
marks the call ended, so that whatever error the interrupted operation raises reads as a
timeout.

A call holds one thing at a time and lets it go (`Call.let_go`) before anyone else may take
it, under the same lock the deadline takes: an interrupt never reaches a connection that has
gone back to its pool or on to another call. A finished call stays in the heap until its
deadline comes (it is then dropped unseen), so the heap holds at most the calls started
within one timeout.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Protocol

DEADLINE = "deadline"  # Call.ended_by: its time ran out
CLOSED = "closed"  # Call.ended_by: CallDeadlines.close ended it


class Interruptible(Protocol):
    """What a call may hold: something it blocks on that another thread can interrupt."""

    def interrupt(self) -> None:
        """Make the operation blocked on it return at once (it then fails); never raises."""
        ...


class Call:
    """One call's deadline, from `CallDeadlines.start`. `step` says what the call is doing,
    for its error text; it stops changing once the call has ended."""

    def __init__(self, lock: threading.Lock, timeout_s: float, at_s: float) -> None:
        self.timeout_s = timeout_s
        self.at_s = at_s  # on time.monotonic()
        self.step = "starting"
        self.ended_by: str | None = None  # DEADLINE or CLOSED once ended
        self.finished = False
        self._lock = lock
        self._held: Interruptible | None = None

    @property
    def ended(self) -> bool:
        """Whether the deadline (or a close) ended the call."""
        return self.ended_by is not None

    def left_s(self) -> float:
        """Seconds until the deadline; negative past it."""
        return self.at_s - time.monotonic()

    def enter(self, step: str) -> None:
        """Say what the call does next (kept as it was once the call has ended)."""
        if self.ended_by is None:
            self.step = step

    def hold(self, held: Interruptible) -> None:
        """Interrupt `held` at the deadline, until let go; at once when already past it."""
        with self._lock:
            if self.finished:
                return
            self._held = held
            if self.ended_by is not None:
                held.interrupt()

    def let_go(self, held: Interruptible) -> None:
        """Stop holding `held`: the deadline no longer reaches it."""
        with self._lock:
            if self._held is held:
                self._held = None

    def finish(self) -> None:
        """The call is over: let go of what it holds and stop watching it."""
        with self._lock:
            self.finished = True
            self._held = None

    def end(self, reason: str) -> None:
        """With the lock held: mark the call ended and interrupt what it holds."""
        if self.finished or self.ended_by is not None:
            return
        self.ended_by = reason
        if self._held is not None:
            self._held.interrupt()


class CallDeadlines:
    """Ends calls at their deadlines, on one thread started with the first call; thread-safe.
    `close()` ends every call in flight and stops the thread."""

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, Call]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, timeout_s: float) -> Call:
        """A call that ends `timeout_s` from now, unless it finishes first. After `close()`,
        a call that has already ended."""
        at_s = time.monotonic() + timeout_s
        call = Call(self._lock, timeout_s, at_s)
        with self._lock:
            if self._closed:
                call.end(CLOSED)
                return call
            heapq.heappush(self._heap, (at_s, next(self._order), call))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=self._thread_name, daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is call:
                self._changed.notify()
        return call

    def close(self) -> None:
        """End every call in flight (their held things interrupted) and stop the thread."""
        with self._lock:
            self._closed = True
            for _, _, call in self._heap:
                call.end(CLOSED)
            self._heap.clear()
            self._changed.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                if not self._heap:
                    self._changed.wait()
                    continue
                at_s, _, call = self._heap[0]
                if not call.finished:
                    wait_s = at_s - time.monotonic()
                    if wait_s > 0:
                        self._changed.wait(wait_s)
                        continue
                    call.end(DEADLINE)
                heapq.heappop(self._heap)
