"""The first SIGTERM or SIGINT starts one shutdown deadline, a second exits at once, and the
handlers that were there before come back."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from clock_server.runtime.signals import BACKSTOP_GRACE_S, ReloadSignal, ShutdownSignals


class Exits:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


def test_the_first_signal_starts_the_deadline_and_a_second_exits_at_once() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    asked: list[float] = []
    exits = Exits()
    with ShutdownSignals(3_600, lambda: asked.append(1), exit_now=exits) as signals:
        assert signals.deadline is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert asked == [1] and exits.codes == []
        assert signals.deadline is not None
        assert 3_599 < signals.deadline.remaining_s() <= 3_600
        assert signals.deadline_or_new() is signals.deadline
        os.kill(os.getpid(), signal.SIGINT)
        assert asked == [1] and exits.codes == [1]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_shutdown_that_outlives_its_deadline_is_ended_by_the_backstop() -> None:
    exits = Exits()
    with ShutdownSignals(0.05, lambda: None, exit_now=exits):
        os.kill(os.getpid(), signal.SIGTERM)
    assert exits.codes == []  # leaving the block does not disarm it
    assert exits.called.wait(BACKSTOP_GRACE_S + 2)
    assert exits.codes == [1]


def test_only_the_signals_named_are_taken() -> None:
    exits = Exits()
    # Python's own SIGINT handler, whatever the suite was started with (a shell starts a
    # background job with SIGINT ignored, and Python then leaves it so)
    started_with = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with ShutdownSignals(3_600, lambda: None, (signal.SIGTERM,), exit_now=exits):
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, started_with)


def test_sighup_asks_for_a_reload_and_ends_nothing() -> None:
    before = signal.getsignal(signal.SIGHUP)
    asked: list[int] = []
    with ReloadSignal(lambda: asked.append(1)):
        os.kill(os.getpid(), signal.SIGHUP)
        os.kill(os.getpid(), signal.SIGHUP)
        assert asked == [1, 1]
    assert signal.getsignal(signal.SIGHUP) == before
