"""What goes where, now: the ring path's dispatch policy, as one pure decision.

No threads, no clock reads: given what the heap holds (`HeapView`), how many lanes of each
kind are busy (`Busy`), the room each webhook application has, the horizons of this pass
and the tuning, `decide` says which claims go to which lane and connection. The ring loop
(`Ringer`) carries the decision out; tests/test_dispatch.py states its rules in a table.

The rules, in words:
- Every application with due claims gets a share of a batch: when more is due than a batch
  takes, each gets an equal part of what is left, the smallest first (max-min).
- An application with few due (at most `few_due`) never shares a transaction with another's
  backlog: beside a backlog its claims go to an express lane, even while a lane is free,
  and a lane's batch leaves them in the heap.
- A backlog beside other applications' claims takes at most `beside_backlog_lanes` lanes.
- With every lane busy, applications with few due still ring, in an express lane.
- A batch gathers the claims due over a span past the lead only while the lead is short, a
  lane of its kind stays free beside it, and the store locks rows, not the whole database.
- Express batches publish on the express connection; so do the few rows of applications
  beside a backlog in a lane's batch.
- A webhook application takes no more than its room for calls, and nothing past the lead:
  a call waiting for its moment would hold a place of that room.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clock_server.engine.tuning import RingTuning

LANE = "lane"
EXPRESS = "express"


@dataclass(frozen=True, slots=True)
class Horizons:
    """How far ahead this pass looks: claims due by `due_by_ms` are due now (the lead
    included); a batch gathers those due by its kind's gather horizon too."""

    due_by_ms: int
    gather_by_ms: int
    express_gather_by_ms: int


@dataclass(frozen=True, slots=True)
class HeapView:
    """Per application holding claims: how many are due by each horizon, and its earliest
    due time. An application with none due by a horizon may be missing from its map."""

    due: Mapping[str, int]
    gathered: Mapping[str, int]
    gathered_express: Mapping[str, int]
    earliest: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Busy:
    """Lanes of each kind with a batch in flight."""

    lanes: int = 0
    express: int = 0


@dataclass(frozen=True, slots=True)
class LaneBatch:
    """Claims for one lane: each application's earliest `take[application]`, all due by
    `due_by_ms`, gathered `gather_ms` past the lead; `express_connection` names the
    applications whose rows go on the express connection."""

    lane: str
    take: Mapping[str, int]
    due_by_ms: int
    gather_ms: int
    express_connection: frozenset[str]

    @property
    def size(self) -> int:
        return sum(self.take.values())


@dataclass(frozen=True, slots=True)
class Decision:
    """The batches to hand to lanes now. With none, `next_due_ms` is when the next claim
    that could go falls due (the loop looks again a lead before it; None: when woken);
    `waits_for_lane` says the loop waits for a lane to come free, which should wake it."""

    batches: tuple[LaneBatch, ...] = ()
    next_due_ms: int | None = None
    waits_for_lane: bool = False


def horizons(
    now_ms: int, lead_ms: int, busy: Busy, tuning: RingTuning, locks_rows: bool = True
) -> Horizons:
    """The horizons of a pass at `now_ms` with the lead at `lead_ms`. Where a ring
    transaction holds the whole database (not `locks_rows`: SQLite) nothing is gathered: a
    longer transaction would delay every write."""
    due_by_ms = now_ms + lead_ms
    if not locks_rows:
        return Horizons(due_by_ms, due_by_ms, due_by_ms)
    lane_span = _gather_span(tuning.gather_ms, lead_ms, busy.lanes, tuning.lanes, tuning)
    express_span = 0
    if tuning.has_express_lanes:
        express_span = _gather_span(
            tuning.express_gather_ms, lead_ms, busy.express, tuning.express_lanes, tuning
        )
    return Horizons(due_by_ms, due_by_ms + lane_span, due_by_ms + express_span)


def _gather_span(span_ms: int, lead_ms: int, busy: int, lanes: int, tuning: RingTuning) -> int:
    """A batch holds its lane for the lead, the span and its confirms: with the lead grown
    under load, or no second lane of its kind free, gathered batches kept every lane busy
    and what fell due waited for one."""
    if lead_ms > tuning.gather_ms or busy + 2 > lanes:
        return 0
    return span_ms


def decide(
    view: HeapView,
    busy: Busy,
    room: Mapping[str, int],
    horizons: Horizons,
    tuning: RingTuning,
) -> Decision:
    """Which claims go to which lane now (the module's docstring states the rules)."""
    if not tuning.has_express_lanes:
        return _lane_batch(view, room, horizons, tuning, leave_few=False)
    batches: list[LaneBatch] = []
    if busy.express < tuning.express_lanes and _backlog(view.due, tuning.few_due):
        express = _express_batch(view, room, horizons, tuning)
        if express is not None:
            batches.append(express)
            busy = Busy(busy.lanes, busy.express + 1)
            view = _without(view, express.take)
    held_back = busy.lanes >= tuning.beside_backlog_lanes and _backlog_beside_others(view, tuning)
    if busy.lanes < tuning.lanes and not held_back:
        lane = _lane_batch(view, room, horizons, tuning, leave_few=True)
        if batches:
            return Decision((*batches, *lane.batches))
        return lane
    if batches:
        return Decision(tuple(batches), waits_for_lane=True)
    # Every lane is busy, or a backlog holds its share of them: the few still ring.
    if busy.express >= tuning.express_lanes:
        return Decision(waits_for_lane=True)  # the first lane to finish wakes the loop
    express = _express_batch(view, room, horizons, tuning)
    if express is not None:
        return Decision((express,), waits_for_lane=True)
    few_heads = [
        due_ms
        for app, due_ms in view.earliest.items()
        if view.due.get(app, 0) <= tuning.few_due and room.get(app, 1) > 0
    ]
    return Decision(next_due_ms=min(few_heads, default=None), waits_for_lane=True)


def _lane_batch(
    view: HeapView,
    room: Mapping[str, int],
    horizons: Horizons,
    tuning: RingTuning,
    leave_few: bool,
) -> Decision:
    """A lane's batch: a fair share of what is due by the gather horizon; with `leave_few`,
    beside a backlog, without the applications with few due (the express lanes' claims)."""
    counts = _capped(_gathered(view.gathered, view.due, room), room)
    if leave_few and sum(view.gathered.values()) > tuning.few_due and len(view.earliest) > 1:
        left = few_beside_backlog(counts, tuning.few_due)
        counts = {app: count for app, count in counts.items() if app not in left}
    take = fair_shares(counts, tuning.batch)
    if take:
        batch = LaneBatch(
            LANE,
            take,
            horizons.gather_by_ms,
            horizons.gather_by_ms - horizons.due_by_ms,
            _beside(take, tuning.few_due),
        )
        return Decision((batch,))
    # Those with no room wait for a call of theirs to end, which wakes the loop.
    heads = [due for app, due in view.earliest.items() if room.get(app, 1) > 0]
    return Decision(next_due_ms=min(heads, default=None))


def _express_batch(
    view: HeapView, room: Mapping[str, int], horizons: Horizons, tuning: RingTuning
) -> LaneBatch | None:
    """The due claims of each application with few due, each with those it has due by the
    express gather horizon, up to `few_due` of its own and a batch in all."""
    take: dict[str, int] = {}
    left = tuning.batch
    for app, due in view.due.items():
        if not 0 < due <= tuning.few_due or left <= 0:
            continue
        gathered = due if app in room else max(view.gathered_express.get(app, 0), due)
        count = min(gathered, tuning.few_due, left)
        count = min(count, room.get(app, count))
        if count > 0:
            take[app] = count
            left -= count
    if not take:
        return None
    span_ms = horizons.express_gather_by_ms - horizons.due_by_ms
    return LaneBatch(EXPRESS, take, horizons.express_gather_by_ms, span_ms, frozenset(take))


def fair_shares(counts: Mapping[str, int], limit: int) -> dict[str, int]:
    """Split `limit` between applications by their due counts: the smallest first, each
    taking no more than an equal part of what is left (max-min fairness). When everything
    fits, each takes all of its own."""
    shares: dict[str, int] = {}
    left = limit
    ordered = sorted(((app, count) for app, count in counts.items() if count > 0),
                     key=lambda item: item[1])  # fmt: skip
    for index, (application, count) in enumerate(ordered):
        equal = left // (len(ordered) - index)
        take = min(count, max(equal, 1 if left else 0))
        if take:
            shares[application] = take
            left -= take
    return shares


def few_beside_backlog(counts: Mapping[str, int], few: int) -> set[str]:
    """The applications with at most `few` when another has more: those beside a backlog."""
    if not _backlog(counts, few):
        return set()
    return {application for application, count in counts.items() if count <= few}


def _backlog(counts: Mapping[str, int], few: int) -> bool:
    return any(count > few for count in counts.values())


def _backlog_beside_others(view: HeapView, tuning: RingTuning) -> bool:
    """More due than a batch takes while more than one application holds claims."""
    return len(view.earliest) > 1 and sum(view.due.values()) > tuning.batch


def _beside(take: Mapping[str, int], few: int) -> frozenset[str]:
    """In a batch that holds a backlog's many, the applications with few: on the backlog's
    own connection the broker reads them only after every message before them (finding 47)."""
    if sum(take.values()) <= few:
        return frozenset()
    return frozenset(few_beside_backlog(take, few))


def _gathered(
    gathered: Mapping[str, int], due: Mapping[str, int], room: Mapping[str, int]
) -> Mapping[str, int]:
    """What each application gives a batch: those due by the gather horizon, but a webhook
    application (one with a `room`) only those due now: a call waiting for its moment would
    hold a place of its room meanwhile."""
    if not room:
        return gathered
    return {app: due.get(app, 0) if app in room else count for app, count in gathered.items()}


def _capped(counts: Mapping[str, int], room: Mapping[str, int]) -> dict[str, int]:
    if not room:
        return {app: count for app, count in counts.items() if count > 0}
    capped = ((app, min(count, room.get(app, count))) for app, count in counts.items())
    return {app: count for app, count in capped if count > 0}


def _without(view: HeapView, taken: Mapping[str, int]) -> HeapView:
    """The view once each application's earliest `taken` are gone."""

    def less(counts: Mapping[str, int]) -> dict[str, int]:
        return {app: max(count - taken.get(app, 0), 0) for app, count in counts.items()}

    return HeapView(less(view.due), less(view.gathered), less(view.gathered_express),
                    view.earliest)  # fmt: skip
