"""Publisher confirms: which of a batch's messages the broker took, by delivery tag."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from clock_server.model import OutgoingMessage
from clock_server.settings import PUBLISH_PATIENCE


def waits_on_s(timeout_s: float, waited_s: float, quiet_s: float | None) -> float:
    """How much longer to wait for a batch not all confirmed after `waited_s` of a wait given
    `timeout_s`; 0 gives it up. The timeout counts from the last time the broker said
    anything on the connection (a confirm, a heartbeat: `quiet_s` ago; None with no open,
    unblocked connection), not from the send, and the whole wait is at most PUBLISH_PATIENCE
    timeouts.

    A broker that still talks is working through a backlog (its confirms wait for the disk,
    for a quorum's replicas): given up on, this batch's alarms would be published again and
    add to that backlog. One that has said nothing for the timeout has stopped (stalled, cut
    off); one that blocked publishers said so and is not waited for."""
    if quiet_s is None:
        return 0.0
    return max(0.0, min(timeout_s - quiet_s, PUBLISH_PATIENCE * timeout_s - waited_s))


class Batch:
    """The outcome of one published batch, shared by the caller and the IO thread."""

    def __init__(self, messages: list[OutgoingMessage], size: int | None = None) -> None:
        """`size`, without `messages`: a batch whose messages are made when it is sent."""
        self.messages = messages
        self.size = len(messages) if size is None else size
        self.done = threading.Event()
        self._results: list[bool | None] = [None] * self.size
        self._unresolved = self.size
        self._lock = threading.Lock()
        self.sent_at: float | None = None  # time.monotonic() when it went out
        self.settled_at: float | None = None  # and when its last confirm came
        self.sent_at_ms: int | None = None  # a timed batch's moment of sending, on its clock
        self.too_late: list[int] = []  # messages withheld: their cutoff had passed
        self._outgoing: list[int] | None = None  # the indices sent, when not all are

    @property
    def outgoing(self) -> list[OutgoingMessage]:
        """The messages to send: all but those withheld, in order."""
        if self._outgoing is None:
            return self.messages
        return [self.messages[index] for index in self._outgoing]

    def withhold(self, indices: list[int]) -> None:
        """Leave these messages out of the send: False in the outcome, listed in `too_late`.
        Only before the batch is sent."""
        with self._lock:
            left_out = set(indices)
            self.too_late = sorted(left_out)
            self._outgoing = [i for i in range(self.size) if i not in left_out]
            for index in left_out:
                if self._results[index] is None:
                    self._results[index] = False
                    self._unresolved -= 1
            if self._unresolved == 0:
                self.done.set()

    def confirm_seconds(self) -> float | None:
        """From sending the batch to its last confirm; None unless every message of it was
        sent and confirmed."""
        if self.sent_at is None or self.settled_at is None:
            return None
        return self.settled_at - self.sent_at

    def resolve(self, start: int, stop: int, ok: bool, returned: set[str]) -> None:
        """Settle the sent messages start..stop-1, counted among those sent (those not settled
        yet); a message whose id is in `returned` came back unroutable and counts as failed
        (its id is taken out)."""
        with self._lock:
            results, open_ = self._results, not self.done.is_set()
            outgoing = self._outgoing
            for offset in range(start, stop):
                index = offset if outgoing is None else outgoing[offset]
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

    def refused(self) -> list[int]:
        """The indices of the messages the broker nacked or returned as unroutable; any other
        False of the outcome was withheld (`too_late`) or never settled."""
        withheld = set(self.too_late)
        return [
            index
            for index, result in enumerate(self._results)
            if result is False and index not in withheld
        ]


class ConfirmTracker:
    """The batches on one channel whose confirms are still to come, in delivery-tag order.

    Tags run on across batches from 1 on each new channel. A confirm settles one tag, or with
    `multiple` every tag up to it; a message the broker returned as unroutable before its
    confirm counts as failed. Used by the IO thread only.
    """

    def __init__(self) -> None:
        # [first delivery tag, batch, messages before this index settled, messages sent],
        # oldest first
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
        sent = len(batch.outgoing)
        self._unconfirmed.append([self._next_tag, batch, 0, sent])
        self._next_tag += sent

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
            first, batch, settled, sent = entry
            if first > tag:
                return
            stop = min(sent, tag - first + 1)
            batch.resolve(settled, stop, acked, self._returned)
            entry[2] = max(settled, stop)

    def _settle_one(self, tag: int, acked: bool) -> None:
        for first, batch, _settled, sent in self._unconfirmed:
            if first <= tag < first + sent:
                batch.resolve(tag - first, tag - first + 1, acked, self._returned)
                return
