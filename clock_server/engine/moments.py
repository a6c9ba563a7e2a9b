"""When each row of a ring batch may ring, and its rows grouped by that moment."""

from __future__ import annotations

from clock_server.model import RingRow


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
