"""The bounded in-memory set of claimed alarms, ordered by due time, shared fairly between
applications when more is due than one ring batch takes."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, cast

from sortedcontainers import SortedList

from clock_server.model import Claim

# A claim is held as a plain tuple of its fields, in Claim's order: the garbage collector stops
# tracking a plain tuple of numbers and strings the first time it looks at it, but follows a
# NamedTuple on every pass, and a heap of 100,000 claims made each full pass of the collector
# pause the engine's threads for tens of milliseconds (finding 47).
_Held = tuple[int, int, int, str]
_DUE: Final = 0
_APP: Final = 3
_as_claims = Claim._make


def _claims(held: Iterable[_Held]) -> list[Claim]:
    return [_as_claims(item) for item in held]


@dataclass(frozen=True, slots=True)
class PushResult:
    displaced: list[Claim]  # claims that no longer fit: the caller gives them back
    head_moved_earlier: bool  # the earliest due time is now sooner: wake the ring thread


class ClaimHeap:
    """Holds at most `capacity` claims and always the earliest-due ones. Thread-safe.

    Beside the one list by due time it keeps one per application, so that when more claims
    are due than a batch takes (a backlog), each application with due claims gets its share
    of the batch instead of the earliest due taking all of it: one application's burst does
    not hold back another's alarms for the length of its drain.
    """

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._items: SortedList = SortedList()
        self._by_app: dict[str, SortedList] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def free(self) -> int:
        return self.capacity - len(self._items)

    def next_due_ms(self, skip: Collection[str] = ()) -> int | None:
        """The earliest due time, or with `skip`, the earliest of the other applications'."""
        with self._lock:
            if not skip:
                return self._items[0][_DUE] if self._items else None
            heads = [own[0][_DUE] for app, own in self._by_app.items() if app not in skip]
            return min(heads, default=None)

    def latest_due_ms(self) -> int | None:
        with self._lock:
            return self._items[-1][_DUE] if self._items else None

    def backlog_beside_others(self, now_ms: int, more_than: int) -> bool:
        """Whether more than `more_than` claims are due by `now_ms` while more than one
        application holds claims."""
        with self._lock:
            return len(self._by_app) > 1 and self._items.bisect_right(_bound(now_ms)) > more_than

    def held_per_application(self) -> dict[str, int]:
        with self._lock:
            return {application: len(own) for application, own in self._by_app.items()}

    def push_many(self, claims: Iterable[Claim], shared: bool = False) -> PushResult:
        """Add claims; when over capacity, the latest-due ones are displaced and returned.
        With `shared`, the claims displaced are instead the latest of the application that
        holds the most: a heap full of one application's backlog makes room for others."""
        displaced: list[_Held] = []
        with self._lock:
            head_before = self._items[0][_DUE] if self._items else None
            for claim in claims:
                held = cast(_Held, tuple(claim))
                self._items.add(held)
                self._app_list(claim.application).add(held)
                if len(self._items) > self.capacity:
                    latest = self._displace_from_largest() if shared else self._items.pop()
                    self._forget(latest)
                    displaced.append(latest)
            head_after = self._items[0][_DUE] if self._items else None
        moved = head_after is not None and (head_before is None or head_after < head_before)
        return PushResult(displaced=_claims(displaced), head_moved_earlier=moved)

    def pop_due(
        self,
        now_ms: int,
        limit: int,
        caps: Mapping[str, int] | None = None,
        leave_few: int | None = None,
    ) -> list[Claim]:
        """Remove and return up to `limit` claims with due_ms <= now_ms: all of them, earliest
        first, when they fit; otherwise an equal share of `limit` for each application with
        due claims (an application with fewer due gets all of its own, the rest is shared
        among the others), each application's earliest first. An application in `caps` gives
        at most that many, and the rest of its claims stay. With `leave_few`, while an
        application has more than that many due, those with at most that many give none:
        they are left to the express lanes (`pop_few`)."""
        bound = _bound(now_ms)
        with self._lock:
            due = self._items.bisect_right(bound)
            beside = leave_few is not None and due > leave_few and len(self._by_app) > 1
            if not caps and not beside and (due <= limit or len(self._by_app) == 1):
                return _claims(self._pop_first(min(due, limit)))
            due_per_app = self._due_per_app(bound)
            if caps:
                capped = ((app, min(count, caps.get(app, count))) for app, count in due_per_app)
                due_per_app = [(app, count) for app, count in capped if count > 0]
            if beside and leave_few is not None:
                left = few_beside_backlog(dict(due_per_app), leave_few)
                due_per_app = [(app, count) for app, count in due_per_app if app not in left]
            whole = sum(count for _, count in due_per_app) == due  # none capped or left
            if whole and (due <= limit or len(due_per_app) == 1):
                return _claims(self._pop_first(min(due, limit)))
            return _claims(self._take_shares(due_per_app, limit))

    def _take_shares(self, due_per_app: list[tuple[str, int]], limit: int) -> list[_Held]:
        taken: list[_Held] = []
        for application, count in _shares(due_per_app, limit):
            own = self._by_app[application]
            share = list(own.islice(0, count))
            del own[:count]
            if not own:
                del self._by_app[application]
            for held in share:
                self._items.remove(held)
            taken.extend(share)
        return taken

    def pop_few(
        self,
        now_ms: int,
        limit: int,
        few: int,
        beside_backlog: bool = False,
        gather_to_ms: int | None = None,
    ) -> tuple[list[Claim], int | None]:
        """Remove and return, up to `limit` in all, the due claims (due_ms <= now_ms) of each
        application that has at most `few` due; an application with more is left whole.
        With `gather_to_ms`, each application that has some due also gives those due by
        then, up to `few` of its claims in all. With `beside_backlog`, nothing unless some
        application has more than `few` due. Also returns the earliest due time left among
        the applications not left whole, or None: when to look again."""
        bound = _bound(now_ms)
        gather_bound = _bound(gather_to_ms) if gather_to_ms is not None else None
        taken: list[_Held] = []
        next_ms: int | None = None
        with self._lock:
            counts = [(app, own, own.bisect_right(bound)) for app, own in self._by_app.items()]
            if beside_backlog and not few_beside_backlog({a: n for a, _, n in counts}, few):
                return [], None
            for application, own, count in counts:
                if count > few:
                    continue
                if count and gather_bound is not None:
                    count = min(own.bisect_right(gather_bound), few)
                count = min(count, limit - len(taken))
                share = list(own.islice(0, count))
                del own[:count]
                for held in share:
                    self._items.remove(held)
                taken.extend(share)
                if not own:
                    del self._by_app[application]
                elif next_ms is None or own[0][_DUE] < next_ms:
                    next_ms = own[0][_DUE]
        return _claims(taken), next_ms

    def drain(self) -> list[Claim]:
        """Remove and return everything (at shutdown, to hand the claims back)."""
        with self._lock:
            taken = _claims(self._items)
            self._items.clear()
            self._by_app.clear()
        return taken

    def _pop_first(self, count: int) -> list[_Held]:
        """Remove and return the `count` earliest claims. Each application's among them are
        the start of its own list, so they leave it as one slice, not one search each."""
        taken = list(self._items.islice(0, count))
        del self._items[:count]
        per_app: dict[str, int] = {}
        for held in taken:
            per_app[held[_APP]] = per_app.get(held[_APP], 0) + 1
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
        own = self._by_app[held[_APP]]
        own.remove(held)
        if not own:
            del self._by_app[held[_APP]]

    def _due_per_app(self, bound: _Held) -> list[tuple[str, int]]:
        counts = ((app, own.bisect_right(bound)) for app, own in self._by_app.items())
        return [(app, count) for app, count in counts if count]


def few_beside_backlog(counts: Mapping[str, int], few: int) -> set[str]:
    """The applications with at most `few` when another has more: those beside a backlog."""
    if not any(count > few for count in counts.values()):
        return set()
    return {application for application, count in counts.items() if count <= few}


def _bound(now_ms: int) -> _Held:
    """Sorts after every claim due at or before `now_ms`."""
    return (now_ms, 2**63, 2**63, "")


def _shares(due_per_app: list[tuple[str, int]], limit: int) -> list[tuple[str, int]]:
    """Split `limit` between applications by their due counts: the smallest first, each
    taking no more than an equal part of what is left (max-min fairness)."""
    shares: list[tuple[str, int]] = []
    left = limit
    ordered = sorted(due_per_app, key=lambda item: item[1])
    for index, (application, count) in enumerate(ordered):
        equal = left // (len(ordered) - index)
        take = min(count, max(equal, 1 if left else 0))
        if take:
            shares.append((application, take))
            left -= take
    return shares
