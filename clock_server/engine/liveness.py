"""The engine's heartbeat, its share of the slots, and taking over engines that fell silent.

Every engine beats in the registry each CLOCK_HEARTBEAT_S. One silent for longer than
CLOCK_ENGINE_DEAD_AFTER_S is declared dead by the first live engine to notice; the live
engines then share its slots among them and read them from the start, so its alarms ring
within seconds of the death. What it had handed to a webhook and not yet recorded is given
back, due now. When an engine that was only stalled beats again it learns it was declared
dead, drops what it held and joins again under a new id; in the meantime the row locks and
versions keep it from ringing anything twice (store.row_locks).

The same step keeps this engine's share of the slots (engine.slot_shares) in line with the
registry. When engines come or go, an engine drops from its heap the alarms of the slots it
lost due more than a heartbeat from now, and reads its new share from the start. Those due
sooner ring where they are, so no alarm waits while the engines' views of the registry
differ by up to a heartbeat; an alarm both engines hold rings once, under its row lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from clock_server.engine.heap import ClaimHeap
from clock_server.engine.slot_shares import SlotShare, share_of
from clock_server.metrics import Metrics
from clock_server.model import EngineRecord
from clock_server.slot_space import SLOTS
from clock_server.store.ports import EngineRegistry
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Liveness:
    """This engine's membership of the registry: one step beats, then declares dead and
    takes over the engines that stopped beating."""

    def __init__(
        self,
        registry: EngineRegistry,
        heap: ClaimHeap,
        clock: Clock,
        metrics: Metrics,
        *,
        instance_id: str,
        lease_ms: int,
        heartbeat_s: float,
        dead_after_s: float,
        on_claims_returned: Callable[[], None],
        share: SlotShare | None = None,
        on_share_moved: Callable[[], None] | None = None,
    ) -> None:
        """`on_claims_returned`: alarms were made due again (a takeover); `on_share_moved`:
        this engine's share of the slots moved, or it joined again: read them afresh."""
        self.registry = registry
        self.heap = heap
        self.clock = clock
        self.metrics = metrics
        self.instance_id = instance_id
        self.lease_ms = lease_ms
        self.heartbeat_s = heartbeat_s
        self.dead_after_ms = int(dead_after_s * 1000)
        self.on_claims_returned = on_claims_returned
        self.share = share or SlotShare()
        self.on_share_moved = on_share_moved or on_claims_returned
        self.engine_id: int | None = None  # the registry id this engine's claims carry
        self._id_lock = threading.Lock()  # held while claiming under the id and changing it
        # When this engine may judge others again; None while its own beats fail.
        self._judges_from_ms: int | None = 0

    @contextlib.contextmanager
    def claiming(self) -> Iterator[int]:
        """The id to claim under, joining first if this engine has not yet. The id does not
        change until the block ends."""
        with self._id_lock:
            if self.engine_id is None:
                self._join_locked(self.clock.now_ms())
            assert self.engine_id is not None
            yield self.engine_id

    def join(self) -> None:
        """Register this engine now, unless it has already joined."""
        with self.claiming():
            pass

    def leave(self) -> None:
        """Remove this engine from the registry; call it once it holds no claim."""
        with self._id_lock:
            engine_id, self.engine_id = self.engine_id, None
        if engine_id is not None:
            self.registry.remove(engine_id)

    def run_once(self) -> float:
        """Beat, then judge the others; returns seconds until the next step."""
        now_ms = self.clock.now_ms()
        try:
            self._beat(now_ms)
        except Exception:
            self._judges_from_ms = None
            raise
        if self._judges_from_ms is None:
            # Back after its own beats failed (most likely the database was away for every
            # engine): the others need a chance to beat again before they are taken for dead.
            self._judges_from_ms = now_ms + self.dead_after_ms // 2
        if now_ms < self._judges_from_ms:
            self._keep_share(self.registry.live_engines(), now_ms)
            return self.heartbeat_s
        engines = self.registry.declare_dead(now_ms - self.dead_after_ms, now_ms)
        for record in engines:
            if record.dead_at is not None and record.id != self.engine_id:
                self._take_over(record, now_ms)
        self._keep_share(engines, now_ms)
        return self._until_next_step(engines, now_ms)

    def _keep_share(self, engines: list[EngineRecord], now_ms: int) -> None:
        """Own this engine's share of the slots among the live `engines`; when it changed,
        drop the alarms of lost slots due after a heartbeat from now and read the new share
        from the start."""
        if self.engine_id is None:
            return
        live = [record.id for record in engines if record.dead_at is None]
        new = share_of(self.engine_id, live)
        old = self.share.move_to(new)
        self.metrics.slots_owned.set(new.size)
        if old is None:
            return
        # In the registry at once, so that others' moves into the new slots mark this engine
        # (store.moves) from before it reads them.
        self.registry.heartbeat(self.engine_id, now_ms, new)
        # After the move: a preload pass that read from the old share holds only what the new
        # one keeps (ClaimHeap.push_many), or held it before this takes it out.
        lost = self.heap.take_outside(new, now_ms + int(self.heartbeat_s * 1000))
        self.metrics.heap_size.set(len(self.heap))
        self.on_share_moved()
        log.info(
            "engine %s owns slots %d-%d of %d, one of %d live engines; was %d-%d: left %d "
            "alarms to the others",
            self.instance_id,
            new.start,
            new.stop - 1,
            SLOTS,
            len({*live, self.engine_id}),
            old.start,
            old.stop - 1,
            len(lost),
            extra={"action": "slots_moved"},
        )

    def _until_next_step(self, engines: list[EngineRecord], now_ms: int) -> float:
        """The next beat, or sooner the moment another engine's silence passes dead_after:
        it is judged then, not up to a heartbeat later, and its claims ring that much
        sooner."""
        next_beat_ms = now_ms + int(self.heartbeat_s * 1000)
        silent_past_ms = [
            record.heartbeat_at + self.dead_after_ms + 1
            for record in engines
            if record.dead_at is None and record.id != self.engine_id
        ]
        step_at_ms = min([next_beat_ms, *silent_past_ms])
        return max(step_at_ms - now_ms, 1) / 1000

    def _join_locked(self, now_ms: int) -> None:
        self.engine_id = self.registry.register(
            self.instance_id, self.lease_ms, now_ms, self.share.current()
        )
        log.info(
            "engine %s joined as %d",
            self.instance_id,
            self.engine_id,
            extra={"action": "engine_joined"},
        )

    def _beat(self, now_ms: int) -> None:
        if self.engine_id is None:
            self.join()
        elif not self.registry.heartbeat(self.engine_id, now_ms, self.share.current()):
            self._rejoin(now_ms)

    def _rejoin(self, now_ms: int) -> None:
        """Declared dead while alive (stalled, or cut off from the database): its slots went
        to the others, so drop what the heap holds, join again under a new id, and read
        its share, whatever it is now, from the start."""
        with self._id_lock:
            old_id = self.engine_id
            self._join_locked(now_ms)
            held = self.heap.drain()
        self.metrics.fenced.inc()
        self.metrics.heap_size.set(len(self.heap))
        self.on_share_moved()
        log.error(
            "engine %s was declared dead as %s and joined again as %s: dropped %d alarms",
            self.instance_id,
            old_id,
            self.engine_id,
            len(held),
            extra={"action": "engine_fenced"},
        )

    def _take_over(self, dead: EngineRecord, now_ms: int) -> None:
        taken = self.registry.take_over(dead, now_ms)
        if taken.released:
            self.metrics.taken_over.inc(taken.released)
            self.on_claims_returned()
        # Past the end of its last possible lease, every claim it had has come back anyway.
        finished = taken.held == 0 or now_ms >= (dead.dead_at or now_ms) + dead.lease_ms
        if finished:
            self.registry.remove(dead.id)
            self.metrics.engines_dead.inc()
        if taken.released or finished:
            log.warning(
                "engine %s (%d) silent for %d ms: declared dead, its slots shared among the "
                "live engines; of the alarms it had handed to webhooks, %d given back, due "
                "now, and %d still held by a ring batch",
                dead.instance_id,
                dead.id,
                now_ms - dead.heartbeat_at,
                taken.released,
                taken.held,
                extra={
                    "action": "claims_taken_over",
                    "released": taken.released,
                    "held": taken.held,
                },
            )
