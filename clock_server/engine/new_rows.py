"""Which alarm ids a preload pass has still to look at: those inserted since it last looked,
and the gaps it found among them.

The preloader reads its slots' due alarms once, in order (engine.preloader); an alarm
inserted due before where that reading has got to is found by its id instead, since ids only
grow. Ids are handed out when a row is inserted, not when its transaction commits, so a
later id can be seen before an earlier one: every id missing below the highest seen is kept
as a gap. Most gaps are ids that never become rows (an INSERT IGNORE of a key that existed, a
transaction rolled back), and a few are transactions still running: a gap is looked at again
at each pass for `gap_ttl_ms`, then once every `slow_look_ms` until `keep_ms` has passed, so
that a create whose commit the database held for seconds is found within `slow_look_ms` of
it, while the gaps that will never be rows cost each pass little. An id given up on (kept
for `keep_ms`, too many gaps, a jump too long to walk) is counted by reason
(`take_given_up`): the preloader then reads from the start, which finds the row of a
transaction slower than that.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

# Why an id was given up on, the `reason` of clock_preload_ids_given_up_total.
UNSEEN = "unseen"  # missing for keep_ms
TOO_MANY = "too_many"  # the oldest gaps beyond max_gaps
JUMP = "jump"  # skipped by a jump of the ids too long to walk


class NewRows:
    """The highest id looked at, and the gaps below it with when each was first missed."""

    def __init__(
        self,
        after_id: int,
        gap_ttl_ms: int,
        keep_ms: int | None = None,
        slow_look_ms: int = 1_000,
        max_gaps: int = 10_000,
    ) -> None:
        """`keep_ms`: how long a gap is kept at all (None: `gap_ttl_ms`, every look)."""
        self.after_id = after_id
        self.gap_ttl_ms = gap_ttl_ms
        self.keep_ms = max(keep_ms if keep_ms is not None else gap_ttl_ms, gap_ttl_ms)
        self.slow_look_ms = slow_look_ms
        self.max_gaps = max_gaps
        self._gaps: dict[int, int] = {}
        self._slow_looked_ms: int | None = None
        self._given_up: Counter[str] = Counter()  # ids by reason, until `take_given_up`

    @property
    def kept(self) -> list[int]:
        """Every gap kept, in order."""
        return sorted(self._gaps)

    def gaps(self, now_ms: int) -> list[int]:
        """The gaps to look at now: those missed within `gap_ttl_ms`, and the older ones too
        once `slow_look_ms` has passed since they were last looked at."""
        looks_slow = (
            self._slow_looked_ms is None or now_ms - self._slow_looked_ms >= self.slow_look_ms
        )
        if looks_slow:
            self._slow_looked_ms = now_ms
            return sorted(self._gaps)
        return sorted(gap for gap, since in self._gaps.items() if now_ms - since <= self.gap_ttl_ms)

    def saw(self, ids: Iterable[int], now_ms: int) -> None:
        """The ids a look after `after_id` and at the gaps found, in any order."""
        found = set(ids)
        for alarm_id in found & self._gaps.keys():
            del self._gaps[alarm_id]
        above = [alarm_id for alarm_id in found if alarm_id > self.after_id]
        if above:
            newest = max(above)
            # A jump of the ids far larger than the gaps kept (an AUTO_INCREMENT set by hand,
            # as a restore does; an engine's first look after it started on an empty table,
            # whose newest id was 0) is not walked: the reading from the start finds what it
            # skipped, at no cost to every pass meanwhile.
            missing = newest - self.after_id - len(above)
            if missing <= self.max_gaps:
                for gap in range(self.after_id + 1, newest):
                    if gap not in found:
                        self._gaps[gap] = now_ms
            else:
                self._given_up[JUMP] += missing
            self.after_id = newest
        expired = [gap for gap, since in self._gaps.items() if now_ms - since > self.keep_ms]
        for gap in expired:
            del self._gaps[gap]
        if len(self._gaps) > self.max_gaps:  # the oldest go first
            by_age = sorted(self._gaps, key=lambda gap: (self._gaps[gap], gap))
            for gap in by_age[: -self.max_gaps]:
                del self._gaps[gap]
            self._given_up[TOO_MANY] += len(by_age) - self.max_gaps
        if expired:
            self._given_up[UNSEEN] += len(expired)

    def take_given_up(self) -> dict[str, int]:
        """The ids given up on since the last call, by reason."""
        taken, self._given_up = dict(self._given_up), Counter()
        return taken
