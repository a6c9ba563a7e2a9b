"""Group commit: concurrent submissions share one write, and each gets its own outcome."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from clock_server.errors import Unavailable
from clock_server.store.group_commit import GroupCommit

from .support import eventually


class Writes:
    """Write functions that record their calls; `hold` keeps the first write in flight."""

    def __init__(self, fail_on: Callable[[int], BaseException | None] = lambda item: None):
        self.groups: list[list[int]] = []
        self.alone: list[int] = []
        self.hold = threading.Event()
        self.hold.set()
        self.in_flight = threading.Event()
        self.fail_on = fail_on
        self.group_error: BaseException | None = None

    def write_group(self, items: Sequence[int]) -> list[int]:
        self.groups.append(list(items))
        if self.group_error is not None:
            raise self.group_error
        return [item * 10 for item in items]

    def write_one(self, item: int) -> int:
        self.alone.append(item)
        self.in_flight.set()
        self.hold.wait(5)
        error = self.fail_on(item)
        if error is not None:
            raise error
        return item * 10


def queued(group_commit: GroupCommit[int, int], count: int) -> None:
    eventually(
        lambda: len(group_commit._waiting) >= count,
        interval_s=0.001,
        message="the submissions did not queue",
    )


def submit_while_first_is_in_flight(
    writes: Writes, group_commit: GroupCommit[int, int], items: list[int]
) -> tuple[list[object], int | BaseException]:
    """Item 0 is written alone and held; `items` queue behind it; then all are let go."""
    writes.hold.clear()

    def outcome(item: int) -> int | BaseException:
        try:
            return group_commit.submit(item)
        except Exception as error:
            return error

    with ThreadPoolExecutor(len(items) + 1) as pool:
        first = pool.submit(outcome, 0)
        assert writes.in_flight.wait(5)
        futures = [pool.submit(outcome, item) for item in items]
        queued(group_commit, len(items))
        writes.hold.set()
        return [f.result(5) for f in futures], first.result(5)


def test_a_lone_submission_is_written_alone_at_once() -> None:
    writes = Writes()
    group_commit = GroupCommit(writes.write_group, writes.write_one)
    assert group_commit.submit(7) == 70
    assert writes.alone == [7] and writes.groups == []


def test_submissions_that_arrive_during_a_write_go_together_in_the_next() -> None:
    writes = Writes()
    group_commit = GroupCommit(writes.write_group, writes.write_one)
    results, first = submit_while_first_is_in_flight(writes, group_commit, list(range(1, 9)))
    assert first == 0
    assert results == [item * 10 for item in range(1, 9)]
    assert writes.alone == [0]
    assert len(writes.groups) == 1 and sorted(writes.groups[0]) == list(range(1, 9))


def test_groups_are_at_most_max_group_long() -> None:
    writes = Writes()
    group_commit = GroupCommit(writes.write_group, writes.write_one, max_group=3)
    results, _ = submit_while_first_is_in_flight(writes, group_commit, list(range(1, 8)))
    assert results == [item * 10 for item in range(1, 8)]
    sizes = [len(group) for group in writes.groups] + [1] * (len(writes.alone) - 1)
    assert sum(sizes) == 7 and max(sizes) <= 3


def test_a_shared_error_fails_the_whole_group_without_retrying_each() -> None:
    writes = Writes()
    writes.group_error = Unavailable("database unavailable: gone")
    group_commit = GroupCommit(writes.write_group, writes.write_one, shared_errors=(Unavailable,))
    results, first = submit_while_first_is_in_flight(writes, group_commit, [1, 2, 3])
    assert first == 0
    assert all(result is writes.group_error for result in results)
    assert writes.alone == [0]


def test_another_error_sends_each_item_alone_so_only_the_bad_one_fails() -> None:
    bad = ValueError("item 2 is bad")
    writes = Writes(fail_on=lambda item: bad if item == 2 else None)
    writes.group_error = ValueError("one item of the group is bad")
    group_commit = GroupCommit(writes.write_group, writes.write_one, shared_errors=(Unavailable,))
    results, _ = submit_while_first_is_in_flight(writes, group_commit, [1, 2, 3])
    assert results == [10, bad, 30]
    assert sorted(writes.alone) == [0, 1, 2, 3]


def test_a_lone_submission_gets_its_own_error() -> None:
    writes = Writes(fail_on=lambda item: Unavailable("down"))
    group_commit = GroupCommit(writes.write_group, writes.write_one, shared_errors=(Unavailable,))
    with pytest.raises(Unavailable, match="down"):
        group_commit.submit(1)
    writes.fail_on = lambda item: None
    assert group_commit.submit(2) == 20  # and the next one leads again


def test_many_threads_each_get_their_own_result_and_every_item_is_written_once() -> None:
    rng = random.Random(3)
    written: list[int] = []
    lock = threading.Lock()

    def record(items: Sequence[int]) -> list[int]:
        time.sleep(rng.random() / 1000)
        with lock:
            written.extend(items)
        return [-item for item in items]

    group_commit = GroupCommit(record, lambda item: record([item])[0], max_group=7)
    items = list(range(2_000))
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(group_commit.submit, items, timeout=30))
    assert results == [-item for item in items]
    assert sorted(written) == items
    assert not group_commit._waiting and not group_commit._writing
