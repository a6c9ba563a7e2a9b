"""When each row of a ring batch may ring, its rows grouped by that moment, and the groups
handed to the publisher to send at their moments."""

from __future__ import annotations

import functools
from collections.abc import Callable

from clock_server.broker.publisher import Publisher, TimedBatch, TimedGroup
from clock_server.engine.messages import message_of
from clock_server.model import OutgoingMessage, RingRow
from clock_server.timesource import Clock

Sent = tuple[list[RingRow], int, TimedBatch]  # rows, the moment they were for, their publish
# Rows split by the connection that publishes them (AmqpHandOff).
Connections = Callable[[list[RingRow]], list[tuple[list[RingRow], Publisher]]]


def hand_over(
    rows: list[RingRow], due_at: dict[int, int], clock: Clock, connections: Connections
) -> list[Sent]:
    """Hand every moment's rows to their publisher at once (`Publisher.start_timed`), which
    sends each group when its moment comes on `clock`, so the caller does not wake at each.
    Returns the groups in the order of their moments."""
    plans: dict[int, tuple[Publisher, list[tuple[TimedGroup, list[RingRow]]]]] = {}
    for at_ms, group in by_moment(rows, due_at, clock.now_ms()):
        for part, on in connections(group):
            cutoffs = [row.latest_ring_at for row in part]
            timed = TimedGroup(
                at_ms,
                len(part),
                functools.partial(_messages, part),
                cutoffs if any(cut is not None for cut in cutoffs) else None,
            )
            plans.setdefault(id(on), (on, []))[1].append((timed, part))
    sent: list[Sent] = []
    for on, plan in plans.values():
        handed = on.start_timed([timed for timed, _ in plan], clock)
        for (timed, part), batch in zip(plan, handed, strict=True):
            sent.append((part, timed.at_ms, batch))
    sent.sort(key=lambda item: item[1])
    return sent


def ready_at(row: RingRow, due_at: dict[int, int]) -> int:
    """Never before the target, unless the alarm's count was reached: its target is then only
    the deadline it beat."""
    if row.count_reached:
        return due_at[row.id]
    return max(due_at[row.id], row.target_ring_at)


def past_cutoff(row: RingRow, at_ms: int) -> bool:
    return row.latest_ring_at is not None and row.latest_ring_at < at_ms


def by_moment(
    rows: list[RingRow], due_at: dict[int, int], now_ms: int
) -> list[tuple[int, list[RingRow]]]:
    """`rows` grouped by the moment each may ring, earliest first, each group interleaved;
    those whose moment has come by `now_ms` in one group, of that moment (a backlog's batch:
    one send, not one per millisecond of their due times)."""
    groups: dict[int, list[RingRow]] = {}
    for row in rows:
        groups.setdefault(max(ready_at(row, due_at), now_ms), []).append(row)
    return [(at_ms, interleaved(groups[at_ms])) for at_ms in sorted(groups)]


def interleaved(rows: list[RingRow]) -> list[RingRow]:
    """Rows published together, taken from each application in turn (each in its own order):
    in a backlog's batch, an application's few rows are not queued behind another's many."""
    if len(rows) < 2 or all(row.application == rows[0].application for row in rows):
        return rows
    rank: dict[str, int] = {}
    keyed = []
    for position, row in enumerate(rows):
        turn = rank.get(row.application, 0)
        rank[row.application] = turn + 1
        keyed.append((turn, position, row))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in keyed]


def _messages(rows: list[RingRow], published_at: int) -> list[OutgoingMessage]:
    return [message_of(row, published_at) for row in rows]
