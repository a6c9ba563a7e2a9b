"""Group commit: requests that arrive while a write is in flight go to the database together.

Single creates from many concurrent clients would otherwise each pay a transaction, three round
trips and a commit. Here the first request to find no write in flight becomes the leader and
writes every request waiting at that moment in one call; the others sleep until their results
are in. When the leader is done, the first request that queued meanwhile leads the next group.
A request that arrives alone is written at once, by its own thread, with nothing added.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Slot(Generic[Item, Result]):
    __slots__ = ("error", "item", "leads", "ready", "result")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.result: Result | None = None
        self.error: BaseException | None = None
        # Held until the slot's outcome is in, or its thread is to lead: a bare lock is a
        # fraction of the cost of an Event, which is a Condition written in Python.
        self.ready = threading.Lock()
        self.ready.acquire()
        self.leads = False

    def outcome(self) -> Result:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


class GroupCommit(Generic[Item, Result]):
    """Runs `write_group` on batches of concurrently submitted items, one batch at a time.

    `write_group(items)` returns one result per item, in order. When it raises an error that
    is one of `shared_errors` (the database is down), every item of the group gets that error;
    any other error sends the items through `write_one` each on its own, so that one bad item
    fails alone, as it would have without grouping.
    """

    def __init__(
        self,
        write_group: Callable[[Sequence[Item]], Sequence[Result]],
        write_one: Callable[[Item], Result],
        shared_errors: tuple[type[BaseException], ...] = (),
        max_group: int = 1_000,
    ) -> None:
        self._write_group = write_group
        self._write_one = write_one
        self._shared_errors = shared_errors
        self._max_group = max_group
        self._lock = threading.Lock()
        self._waiting: list[_Slot[Item, Result]] = []
        self._writing = False

    def submit(self, item: Item) -> Result:
        """Write `item` with whatever else is waiting; its result, or its error raised."""
        slot: _Slot[Item, Result] = _Slot(item)
        with self._lock:
            self._waiting.append(slot)
            leads = not self._writing
            self._writing = True
        if not leads:
            slot.ready.acquire()
            if not slot.leads:
                return slot.outcome()
        self._lead()
        return slot.outcome()

    def _lead(self) -> None:
        with self._lock:
            group = self._waiting[: self._max_group]
            del self._waiting[: self._max_group]
        try:
            self._write(group)
        finally:
            with self._lock:
                if self._waiting:
                    successor = self._waiting[0]
                    successor.leads = True
                    successor.ready.release()
                else:
                    self._writing = False
            for slot in group[1:]:  # group[0] is this thread's own
                slot.ready.release()

    def _write(self, group: list[_Slot[Item, Result]]) -> None:
        if len(group) == 1:
            self._write_alone(group[0])
            return
        try:
            results = self._write_group([slot.item for slot in group])
        except self._shared_errors as error:
            for slot in group:
                slot.error = error
            return
        except Exception:
            for slot in group:
                self._write_alone(slot)
            return
        except BaseException as error:
            for slot in group:
                slot.error = error
            raise
        for slot, result in zip(group, results, strict=True):
            slot.result = result

    def _write_alone(self, slot: _Slot[Item, Result]) -> None:
        try:
            slot.result = self._write_one(slot.item)
        except Exception as error:
            slot.error = error
