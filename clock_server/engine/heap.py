"""The bounded in-memory set of claimed alarms, ordered by due time, shared fairly between
applications when more is due than one ring batch takes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, cast

from sortedcontainers import SortedList

from clock_server.engine.dispatch import HeapView, Horizons, fair_shares
from clock_server.model import Claim
from clock_server.slot_space import ALL_SLOTS, SlotRange

# A claim is held as a plain tuple of its fields, in Claim's order: the garbage collector stops
# tracking a plain tuple of numbers and strings the first time it looks at it, but follows a
# NamedTuple on every pass, and a heap of 100,000 claims made each full pass of the collector
# pause the engine's threads for tens of milliseconds (finding 47).
_Held = tuple[int, int, int, str, int]
_DUE: Final = 0
_ID: Final = 1
_VERSION: Final = 2
_APP: Final = 3
_SLOT: Final = 4
_as_claims = Claim._make


def _claims(held: Iterable[_Held]) -> list[Claim]:
    return [_as_claims(item) for item in held]


@dataclass(frozen=True, slots=True)
class PushResult:
    displaced: list[Claim]  # claims that no longer fit: the caller gives them back
    head_moved_earlier: bool  # the earliest due time is now sooner: wake the ring thread
    # claims of slots the engine no longer owns: the caller gives them back
    outside: list[Claim] = field(default_factory=list)


class ClaimHeap:
    """Holds at most `capacity` claims and always the earliest-due ones. Thread-safe.

    Beside the one list by due time it keeps one per application, so that when more claims
    are due than a batch takes (a backlog), each application with due claims gets its share
    of the batch instead of the earliest due taking all of it: one application's burst does
    not hold back another's alarms for the length of its drain.

    It holds one claim per alarm: pushed again, an alarm is kept at its newer version and
    dropped at the same or an older one, so that reading an alarm twice rings it once. The
    earliest due time of the claims it displaced is kept for the preloader, which reads the
    database again from there (`take_displaced_from`).
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._items: SortedList = SortedList()
        self._by_app: dict[str, SortedList] = {}
        self._by_id: dict[int, _Held] = {}
        self._displaced_from: int | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def free(self) -> int:
        return self.capacity - len(self._items)

    def next_due_ms(self) -> int | None:
        """The earliest due time."""
        with self._lock:
            return self._items[0][_DUE] if self._items else None

    def latest_due_ms(self) -> int | None:
        with self._lock:
            return self._items[-1][_DUE] if self._items else None

    def view(self, horizons: Horizons) -> HeapView:
        """What the dispatch policy decides on: per application, its claims due by each of
        `horizons`, and its earliest due time."""
        bounds = (horizons.due_by_ms, horizons.gather_by_ms, horizons.express_gather_by_ms)
        due: dict[str, int] = {}
        gathered: dict[str, int] = {}
        gathered_express: dict[str, int] = {}
        earliest: dict[str, int] = {}
        horizon = max(bounds)
        with self._lock:
            for application, own in self._by_app.items():
                head = own[0][_DUE]
                earliest[application] = head
                if head > horizon:
                    continue
                counts = [own.bisect_right(_bound(bound)) for bound in bounds]
                due[application], gathered[application], gathered_express[application] = counts
        return HeapView(due, gathered, gathered_express, earliest)

    def held_per_application(self) -> dict[str, int]:
        with self._lock:
            return {application: len(own) for application, own in self._by_app.items()}

    def push_many(
        self,
        claims: Iterable[Claim],
        shared: bool = False,
        slots: Callable[[], SlotRange] | None = None,
    ) -> PushResult:
        """Add claims; when over capacity, the latest-due ones are displaced and returned.
        With `shared`, the claims displaced are instead the latest of the application that
        holds the most: a heap full of one application's backlog makes room for others.
        With `slots`, the slots the engine owns as this push holds the heap's lock: claims of
        other slots are returned, not added (their share moved while they were claimed)."""
        displaced: list[_Held] = []
        outside: list[Claim] = []
        with self._lock:
            if slots is not None:
                owned = slots()
                if owned != ALL_SLOTS:
                    claims = list(claims)
                    outside = [claim for claim in claims if not owned.holds(claim.slot)]
                    claims = [claim for claim in claims if owned.holds(claim.slot)]
            head_before = self._items[0][_DUE] if self._items else None
            by_id = self._by_id
            for claim in claims:
                known = by_id.get(claim.id)
                if known is not None:
                    if known[_VERSION] >= claim.version:
                        continue
                    self._items.remove(known)
                    self._forget(known)
                held = cast(_Held, tuple(claim))
                self._items.add(held)
                self._app_list(claim.application).add(held)
                by_id[claim.id] = held
                if len(self._items) > self.capacity:
                    latest = self._displace_from_largest() if shared else self._items.pop()
                    self._forget(latest)
                    displaced.append(latest)
            if displaced:
                earliest = min(held[_DUE] for held in displaced)
                if self._displaced_from is None or earliest < self._displaced_from:
                    self._displaced_from = earliest
            head_after = self._items[0][_DUE] if self._items else None
        moved = head_after is not None and (head_before is None or head_after < head_before)
        return PushResult(_claims(displaced), moved, outside)

    def pop_due(self, now_ms: int, limit: int) -> list[Claim]:
        """Remove and return up to `limit` claims with due_ms <= now_ms: all of them, earliest
        first, when they fit; otherwise a fair share of `limit` for each application with
        due claims (`dispatch.fair_shares`), each application's earliest first."""
        bound = _bound(now_ms)
        with self._lock:
            counts = {app: own.bisect_right(bound) for app, own in self._by_app.items()}
        return self.take(fair_shares(counts, limit), now_ms)

    def take(self, counts: Mapping[str, int], due_by_ms: int) -> list[Claim]:
        """Remove and return each application's earliest `counts[application]` claims, of
        those due by `due_by_ms` (fewer if it no longer has that many)."""
        bound = _bound(due_by_ms)
        with self._lock:
            asked = {}
            for application, count in counts.items():
                own = self._by_app.get(application)
                if own is not None and count > 0:
                    asked[application] = min(count, own.bisect_right(bound))
            total = sum(asked.values())
            if len(self._by_app) == 1 or total == self._items.bisect_right(bound):
                # The earliest `total` are what was asked for: one slice off the list.
                return _claims(self._pop_first(total))
            taken: list[_Held] = []
            for application, count in asked.items():
                own = self._by_app[application]
                share = list(own.islice(0, count))
                del own[:count]
                if not own:
                    del self._by_app[application]
                for held in share:
                    self._items.remove(held)
                    del self._by_id[held[_ID]]
                taken.extend(share)
        return _claims(taken)

    def take_outside(self, slots: SlotRange, due_after_ms: int) -> list[Claim]:
        """Remove and return the claims due after `due_after_ms` whose slot is not in `slots`:
        this engine no longer owns them (a walk of the whole heap, when engines come or go)."""
        with self._lock:
            moved = [
                held
                for held in self._items
                if held[_DUE] > due_after_ms and not slots.holds(held[_SLOT])
            ]
            for held in moved:
                self._items.remove(held)
                self._forget(held)
        return _claims(moved)

    def take_displaced_from(self) -> int | None:
        """The earliest due time of the claims displaced since the last call, if any."""
        with self._lock:
            earliest, self._displaced_from = self._displaced_from, None
        return earliest

    def drain(self) -> list[Claim]:
        """Remove and return everything (at shutdown, to hand the claims back)."""
        with self._lock:
            taken = _claims(self._items)
            self._items.clear()
            self._by_app.clear()
            self._by_id.clear()
        return taken

    def _pop_first(self, count: int) -> list[_Held]:
        """Remove and return the `count` earliest claims. Each application's among them are
        the start of its own list, so they leave it as one slice, not one search each."""
        taken = list(self._items.islice(0, count))
        del self._items[:count]
        per_app: dict[str, int] = {}
        by_id = self._by_id
        for held in taken:
            per_app[held[_APP]] = per_app.get(held[_APP], 0) + 1
            del by_id[held[_ID]]
        for application, taken_of_app in per_app.items():
            own = self._by_app[application]
            del own[:taken_of_app]
            if not own:
                del self._by_app[application]
        return taken

    def _app_list(self, application: str) -> SortedList:
        own = self._by_app.get(application)
        if own is None:
            own = self._by_app[application] = SortedList()
        return own

    def _displace_from_largest(self) -> _Held:
        largest = max(self._by_app.values(), key=len)
        latest = largest[-1]
        self._items.remove(latest)
        return latest

    def _forget(self, held: _Held) -> None:
        """Out of the application's list and the index by id (the caller took it out of the
        list by due time)."""
        own = self._by_app[held[_APP]]
        own.remove(held)
        if not own:
            del self._by_app[held[_APP]]
        del self._by_id[held[_ID]]


def _bound(now_ms: int) -> _Held:
    """Sorts after every claim due at or before `now_ms`."""
    return (now_ms, 2**63, 2**63, "", 0)
