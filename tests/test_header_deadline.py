"""The header deadline: which connections the listener's periodic look closes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clock_server.runtime.http_channel import close_late_headers

NOW = 1_000.0


def _channel(request: SimpleNamespace | None) -> SimpleNamespace:
    return SimpleNamespace(request=request, will_close=False)


@pytest.mark.parametrize(
    ("request_state", "closed"),
    [
        (None, False),  # between requests: the idle timeout's, not this
        (SimpleNamespace(headers_finished=False, headers_due=NOW + 1), False),  # still in time
        (SimpleNamespace(headers_finished=False, headers_due=NOW), False),  # at the deadline
        (SimpleNamespace(headers_finished=False, headers_due=NOW - 0.001), True),  # late
        (SimpleNamespace(headers_finished=True, headers_due=NOW - 60), False),  # a slow body
    ],
)
def test_a_connection_is_closed_only_when_its_headers_are_late(
    request_state: SimpleNamespace | None, closed: bool
):
    channel = _channel(request_state)
    assert close_late_headers([channel], NOW) == int(closed)
    assert channel.will_close is closed


def test_a_connection_already_closing_stays_so():
    channel = _channel(None)
    channel.will_close = True
    close_late_headers([channel], NOW)
    assert channel.will_close
