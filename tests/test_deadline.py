"""One deadline that the steps of a shutdown share."""

from __future__ import annotations

from clock_server.deadline import Deadline


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_runs_down_to_zero_and_stays_there() -> None:
    clock = Monotonic()
    deadline = Deadline(10, clock)
    assert deadline.remaining_s() == 10 and not deadline.expired
    clock.now += 7.5
    assert deadline.remaining_s() == 2.5
    clock.now += 5
    assert deadline.remaining_s() == 0 and deadline.expired


def test_a_share_ends_early_and_leaves_the_rest_to_the_steps_after_it() -> None:
    clock = Monotonic()
    deadline = Deadline(10, clock)
    clock.now += 2
    first = deadline.share(0.5)  # half of the 8 s left
    assert first.remaining_s() == 4
    clock.now += 4
    assert first.expired and deadline.remaining_s() == 4
