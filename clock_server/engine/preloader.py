"""The preload step: read the alarms of this engine's slots due within the window into the
in-memory heap, without writing to them."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from clock_server.engine.heap import ClaimHeap
from clock_server.engine.loop import Waker
from clock_server.engine.new_rows import NewRows
from clock_server.engine.slot_groups import SlotGroups
from clock_server.metrics import Metrics
from clock_server.model import Claim
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.ports import ClaimStore, EngineRegistry, Position
from clock_server.timesource import Clock

# How many alarms inserted since the last look one pass reads by id at most.
NEW_ROWS_BATCH = 10_000
# How long an id missing below the newest seen is looked for again at every pass. A create's
# transaction commits within milliseconds of its insert, and most gaps never become rows (a
# create of a known key), so a longer time would mostly cost each pass a longer list of ids.
GAP_TTL_MS = 5_000
# After that, until a lease has passed, a gap is looked at once a second: a create whose
# commit the database held longer is found within a second of it, not at the next reading
# from the start up to a lease later.
SLOW_GAP_LOOK_MS = 1_000
# With nothing given up, the reading from the start comes once in this many leases: it reads
# the whole window again (10,000 rows at 1,000 alarms/s), and what it is left to find then is
# a change made by hand, outside the API.
FULL_READING_LEASES = 10
_LAST_ID = 2**63 - 1


# Why the reading starts again from the start: the `reason` of
# clock_preload_readings_from_start_total.
FIRST = "first"  # the engine's first pass
SHARE_MOVED = "share_moved"  # its share of the slots moved, or it joined again after a fence
GAVE_UP = "gave_up"  # an id among the new ones was given up on since the last
ROUTINE = "routine"  # once in FULL_READING_LEASES leases, for a change made by hand


def reads_from_start(
    since_ms: int | None, gave_up: bool, share_moved: bool, lease_ms: int
) -> str | None:
    """Why the reading starts again from the start, `since_ms` after it last did (None: it
    never has), or None when it goes on from where it got to. With `gave_up`, an id among the
    new ones was given up on since: its row may have committed later, due before where the
    reading has got to. `share_moved`: `Preloader.restart` was asked."""
    if since_ms is None:
        return FIRST
    if share_moved:
        return SHARE_MOVED
    if gave_up and since_ms >= lease_ms:
        return GAVE_UP
    if since_ms >= FULL_READING_LEASES * lease_ms:
        return ROUTINE
    return None


class Preloader:
    """Reads the pending alarms of this engine's slots due before now + window, earliest
    first, as far as the heap allows. Nothing is written: the slots are this engine's alone
    (engine.slot_shares), and each ring transaction locks its rows and checks their versions.

    The reading goes once through the alarms in (due time, id) order and remembers where it
    got to (the position): what lies before it is in the heap, rang, or went elsewhere. With
    `read_groups`, the engine's slots are cut into that many groups, read side by side, each
    with its own position (engine.slot_groups). Three
    ways bring an alarm due before the position to the heap:
    - one inserted since: every pass reads the ids inserted since its last look, and the gaps
      among them (engine.new_rows);
    - one another process made due sooner (a PATCH, a re-drive, a count reached, a
      takeover): that process marks this engine's registry row in the same transaction
      (store.moves), and the next pass reads again from that time;
    - one of this engine's own: a retry or an alarm held back goes back to the heap, and the
      claims a full heap displaced are read again from the earliest of them.
    The reading starts again from the start when something may have been missed: the
    engine's share of the slots changed (`restart`); an id among the new ones was given up on
    (at most once a lease); and otherwise once in `FULL_READING_LEASES` leases, which finds a
    change made by hand. The heap keeps one claim per alarm, so a second read is dropped.

    While the heap is full of a backlog (its head overdue by `backlog_ms`), a pass instead
    reads the due alarms of the applications that hold less than an equal part of the heap,
    each application's earliest first, and makes room for them by displacing the latest of
    the application holding the most: one application's backlog, however large, does not
    keep the others' alarms out of the heap. The first such pass comes as soon as the full
    heap's head is that overdue, not at the next interval.
    """

    def __init__(
        self,
        claims: ClaimStore,
        registry: EngineRegistry,
        heap: ClaimHeap,
        clock: Clock,
        ring_waker: Waker,
        metrics: Metrics,
        claiming: Callable[[], contextlib.AbstractContextManager[int]],
        *,
        window_ms: int,
        interval_s: float,
        lease_ms: int,
        batch: int,
        backlog_ms: int = 100,
        slots: Callable[[], SlotRange] = lambda: ALL_SLOTS,
        read_groups: int = 1,
    ) -> None:
        """`claiming`: this engine's registry id (engine.liveness); `backlog_ms`:
        `RingTuning.backlog_ms`; `slots`: the slots this engine owns now; `read_groups`: how
        many groups of them are read side by side (CLOCK_PRELOAD_READ_GROUPS where the store
        reads on several connections at once)."""
        self.claims = claims
        self.registry = registry
        self.backlog_ms = backlog_ms
        self.slots = slots
        self.heap = heap
        self.clock = clock
        self.ring_waker = ring_waker
        self.metrics = metrics
        self.claiming = claiming
        self.window_ms = window_ms
        self.interval_s = interval_s
        self.lease_ms = lease_ms
        self.batch = batch
        self.read_groups = read_groups
        # Cut at the first pass: whether the store reads side by side is asked of the database.
        self._groups: SlotGroups | None = None
        self._readers: ThreadPoolExecutor | None = None
        self._new: NewRows | None = None
        self._read_from_start_ms: int | None = None  # when the reading last started again
        # An id among the new ones was given up on since the reading last started again: it
        # may be a row that committed later, due before where the reading has got to.
        self._gave_up = False
        self._restart = threading.Event()

    def restart(self) -> None:
        """Make the next pass read from the start: the engine's share of the slots moved."""
        self._restart.set()

    @property
    def position(self) -> Position | None:
        """Where the reading of every group has got to; None when the next pass starts one
        from the start."""
        return self._groups.position if self._groups is not None else None

    @property
    def readers(self) -> int:
        """The connections the groups read side by side may take beside the preloader's."""
        return self.read_groups if self.read_groups > 1 else 0

    def close(self) -> None:
        """Stop the threads that read the groups side by side."""
        if self._readers is not None:
            self._readers.shutdown(wait=True)

    def run_once(self) -> float:
        """One pass; returns seconds until the next (0 when a read came back full)."""
        # Real time, not the Clock's: how long the pass took, for clock_preload_duration.
        started = time.perf_counter()
        try:
            return self._pass()
        finally:
            self.metrics.preload_duration.observe(time.perf_counter() - started)

    def _slot_groups(self) -> SlotGroups:
        if self._groups is None:
            side_by_side = self.read_groups > 1 and self.claims.reads_in_parallel
            self._groups = SlotGroups(self.read_groups if side_by_side else 1)
            if side_by_side:
                self._readers = ThreadPoolExecutor(
                    self.read_groups, thread_name_prefix="clock-preload-read"
                )
        return self._groups

    def _pass(self) -> float:
        groups = self._slot_groups()
        now_ms = self.clock.now_ms()
        self._restart_when_due(now_ms, groups)
        with self.claiming() as engine_id:
            self._read_moves(engine_id)
            slots = self.slots()
            more_new = self._read_new(now_ms, slots)
            wait_s = self._read_due(now_ms, slots)
        self._read_again_displaced()
        return 0.0 if more_new else wait_s

    def _restart_when_due(self, now_ms: int, groups: SlotGroups) -> None:
        since_ms = None if self._read_from_start_ms is None else now_ms - self._read_from_start_ms
        reason = reads_from_start(since_ms, self._gave_up, self._restart.is_set(), self.lease_ms)
        if reason is None:
            return
        self._restart.clear()  # before the reading: a restart asked during it counts
        groups.from_start()
        self._read_from_start_ms = now_ms
        self._gave_up = False
        self.metrics.readings_from_start.labels(reason).inc()

    def _read_moves(self, engine_id: int) -> None:
        moves, moved_from = self.registry.moves_of(engine_id)
        if moved_from is None:
            return
        self._slot_groups().read_again_from(moved_from)
        # Cleared once read again; a move marked meanwhile fails the clearing, and the next
        # pass reads from its time too.
        self.registry.clear_moves(engine_id, moves)

    def _read_new(self, now_ms: int, slots: SlotRange) -> bool:
        """Hold the alarms inserted since the last look that are due before the position;
        True when there are more to look at."""
        if self._new is None:
            # What is already there, the reading from the start finds.
            self._new = NewRows(
                self.claims.newest_id(),
                gap_ttl_ms=GAP_TTL_MS,
                keep_ms=self.lease_ms,
                slow_look_ms=SLOW_GAP_LOOK_MS,
            )
            return False
        ids, found = self.claims.load_new(
            self._new.after_id, self._new.gaps(now_ms), NEW_ROWS_BATCH
        )
        self._new.saw(ids, now_ms)
        for reason, count in self._new.take_given_up().items():
            self._gave_up = True
            self.metrics.ids_given_up.labels(reason).inc(count)
        groups = self._slot_groups()
        groups.ranges(slots)  # cut for the slots owned now, before the positions are read
        early = []
        for claim in found:
            position = groups.position_of(claim.slot) if slots.holds(claim.slot) else None
            if position is not None and (claim.due_ms, claim.id) <= position:
                early.append(claim)
        if early:
            self._hold(early)
        return len(ids) >= NEW_ROWS_BATCH

    def _read_due(self, now_ms: int, slots: SlotRange) -> float:
        horizon_ms = now_ms + self.window_ms
        limit = min(self.heap.free(), self.batch)
        if limit == 0:
            if self._backlogged(now_ms):
                self._share(now_ms, horizon_ms, slots)
                return self.interval_s
            return self._until_backlogged_s(now_ms)
        slot_groups = self._slot_groups()
        groups = slot_groups.ranges(slots)
        each = -(-limit // max(len(groups), 1))  # the heap's room, shared out rounding up

        def read(group: tuple[SlotRange, Position | None]) -> list[Claim]:
            return self.claims.load_due(horizon_ms, each, after=group[1], slots=group[0])

        if self._readers is not None and len(groups) > 1:
            readings = list(self._readers.map(read, groups))
        else:
            readings = [read(group) for group in groups]
        full = False
        for index, loaded in enumerate(readings):
            if len(loaded) < each:
                slot_groups.read(index, (horizon_ms, _LAST_ID))
            else:
                full = True
                slot_groups.read(index, (loaded[-1].due_ms, loaded[-1].id))
        loaded = [claim for reading in readings for claim in reading]
        if loaded:
            self._hold(loaded)
        return 0.0 if full else self.interval_s

    def _read_again_displaced(self) -> None:
        displaced_from = self.heap.take_displaced_from()
        if displaced_from is not None:
            self._slot_groups().read_again_from(displaced_from)

    def _until_backlogged_s(self, now_ms: int) -> float:
        """With the heap full: the interval, or less when its head falls a backlog behind
        before then. Other applications' alarms due after the latest held are read only
        once it does (`_share`); a full interval later, they were already late."""
        head_ms = self.heap.next_due_ms()
        if head_ms is None:
            return self.interval_s
        return min(max(head_ms + self.backlog_ms + 1 - now_ms, 1) / 1000, self.interval_s)

    def _backlogged(self, now_ms: int) -> bool:
        head_ms = self.heap.next_due_ms()
        return head_ms is not None and head_ms < now_ms - self.backlog_ms

    def _share(self, now_ms: int, horizon_ms: int, slots: SlotRange) -> None:
        held = self.heap.held_per_application()
        due = self.claims.due_applications(horizon_ms, slots)
        if not due:
            return
        equal = self.heap.capacity // len(held.keys() | due.keys())
        wanting = {app: equal - held.get(app, 0) for app in due if held.get(app, 0) < equal}
        if not wanting:
            return
        each = max(self.batch // len(wanting), 1)
        for application, room in wanting.items():
            # From the application's earliest: those already held are read again and kept once.
            loaded = self.claims.load_due(
                horizon_ms, held.get(application, 0) + min(each, room),
                application=application, slots=slots,
            )  # fmt: skip
            if loaded:
                self._hold(loaded, shared=True)

    def _hold(self, loaded: list[Claim], shared: bool = False) -> None:
        result = self.heap.push_many(loaded, shared, self.slots)
        self.metrics.claimed.inc(len(loaded))
        self.metrics.heap_size.set(len(self.heap))
        if result.head_moved_earlier:
            self.ring_waker.wake()
