"""Publisher confirms: which of a batch's messages the broker took, by delivery tag."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from clock_server.model import OutgoingMessage


class Batch:
    """The outcome of one published batch, shared by the caller and the IO thread."""

    def __init__(self, messages: list[OutgoingMessage]) -> None:
        self.messages = messages
        self.done = threading.Event()
        self._results: list[bool | None] = [None] * len(messages)
        self._unresolved = len(messages)
        self._lock = threading.Lock()
        self.sent_at: float | None = None  # time.monotonic() when it went out
        self.settled_at: float | None = None  # and when its last confirm came

    def confirm_seconds(self) -> float | None:
        """From sending the batch to its last confirm; None unless every message of it was
        sent and confirmed."""
        if self.sent_at is None or self.settled_at is None:
            return None
        return self.settled_at - self.sent_at

    def resolve(self, start: int, stop: int, ok: bool, returned: set[str]) -> None:
        """Settle messages start..stop-1 (those not settled yet); a message whose id is in
        `returned` came back unroutable and counts as failed (its id is taken out)."""
        with self._lock:
            results, open_ = self._results, not self.done.is_set()
            for index in range(start, stop):
                if results[index] is None:
                    message_id = self.messages[index].message_id
                    came_back = bool(returned) and message_id in returned
                    returned.discard(message_id)
                    if open_:  # a finished batch's outcome stays as it was given
                        results[index] = ok and not came_back
                        self._unresolved -= 1
            if open_ and self._unresolved == 0:
                self.settled_at = time.monotonic()
                self.done.set()

    def finish(self) -> int:
        """Freeze the results, unsettled ones as False; returns how many were unsettled."""
        with self._lock:
            unresolved = 0 if self.done.is_set() else self._unresolved
            self.done.set()
            return unresolved

    def outcome(self) -> list[bool]:
        return [result is True for result in self._results]


class ConfirmTracker:
    """The batches on one channel whose confirms are still to come, in delivery-tag order.

    Tags run on across batches from 1 on each new channel. A confirm settles one tag, or with
    `multiple` every tag up to it; a message the broker returned as unroutable before its
    confirm counts as failed. Used by the IO thread only.
    """

    def __init__(self) -> None:
        # [first delivery tag, batch, messages before this index settled], oldest first
        self._unconfirmed: collections.deque[list[Any]] = collections.deque()
        self._next_tag = 1
        self._returned: set[str] = set()

    def reset(self) -> None:
        """A new channel: nothing is awaited, tags start again at 1."""
        self._unconfirmed.clear()
        self._returned.clear()
        self._next_tag = 1

    def sent(self, batch: Batch) -> None:
        """`batch`'s messages went out, in order, as the next delivery tags."""
        batch.sent_at = time.monotonic()
        self._unconfirmed.append([self._next_tag, batch, 0])
        self._next_tag += len(batch.messages)

    def returned(self, message_id: str) -> None:
        """The broker returned this message as unroutable; its confirm follows."""
        self._returned.add(message_id)

    def confirm(self, tag: int, multiple: bool, acked: bool) -> None:
        """An ack or a nack of `tag`, or with `multiple` of every tag up to it."""
        if multiple:
            self._settle_through(tag, acked)
        else:
            self._settle_one(tag, acked)
        unconfirmed = self._unconfirmed
        while unconfirmed and unconfirmed[0][1].done.is_set():
            unconfirmed.popleft()

    def oldest(self) -> Batch | None:
        """The oldest batch still awaiting a confirm (settled ones are let go)."""
        return self._unconfirmed[0][1] if self._unconfirmed else None

    def _settle_through(self, tag: int, acked: bool) -> None:
        for entry in self._unconfirmed:
            first, batch, settled = entry
            if first > tag:
                return
            stop = min(len(batch.messages), tag - first + 1)
            batch.resolve(settled, stop, acked, self._returned)
            entry[2] = max(settled, stop)

    def _settle_one(self, tag: int, acked: bool) -> None:
        for first, batch, _settled in self._unconfirmed:
            if first <= tag < first + len(batch.messages):
                batch.resolve(tag - first, tag - first + 1, acked, self._returned)
                return
