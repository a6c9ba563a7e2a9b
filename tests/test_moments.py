"""A ring batch's rows grouped by the moment each may ring."""

from __future__ import annotations

from clock_server.engine.moments import by_moment
from clock_server.model import RingRow


def _row(alarm_id: int, application: str, target: int, **counts: int) -> RingRow:
    return RingRow(alarm_id, application, f"b{alarm_id}", "p", target, None, 0, **counts)


def test_rows_whose_moment_has_come_go_together_and_later_ones_each_at_theirs():
    now = 1_000
    rows = [
        _row(1, "a", 990),
        _row(2, "a", 995),
        _row(3, "b", 1_000),
        _row(4, "a", 1_004),
        _row(5, "b", 1_004),
        _row(6, "a", 1_010),
    ]
    due_at = {row.id: row.target_ring_at for row in rows}
    due_at[2] = 1_007  # a retry: due after its target

    groups = [(at, [row.id for row in group]) for at, group in by_moment(rows, due_at, now)]

    assert groups == [(1_000, [1, 3]), (1_004, [4, 5]), (1_007, [2]), (1_010, [6])]


def test_a_group_takes_each_application_in_turn_and_a_count_reached_rings_at_its_due_time():
    rows = [_row(1, "a", 1_000), _row(2, "a", 1_000), _row(3, "b", 1_000)]
    rows.append(_row(4, "c", 5_000, ring_after_count=3, counted=3))  # its target: a deadline
    due_at = {1: 1_000, 2: 1_000, 3: 1_000, 4: 1_000}

    [(at, group)] = by_moment(rows, due_at, 900)

    assert at == 1_000 and [row.id for row in group] == [1, 3, 4, 2]
