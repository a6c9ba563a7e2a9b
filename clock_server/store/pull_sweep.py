"""Pull messages found when no puller comes: those whose cutoff passed, and those whose last
lease ended unacked.

A pull finds such a message only when somebody pulls its application again (store.pulls);
when the pullers are gone, the sweep does it instead, with the same decision (`pull_fate`)
and the same writes: expired, or dead with its events and dead letter (`finish_lapsed`), or,
with leases left, its failed lease recorded (`failed_lease_events`) and marked so, staying
ready for the next pull, which then records nothing more for it. Each application is
read by the (application, status, next_try_time) index a batch at a time, without locks,
at most `max_examined` ready messages per application and run: a backlog of millions that
pullers will take in time costs each run a bounded read, the next run going on where this
one stopped, and starting over once it reached the end. The rows to finish are then locked
by id in a short transaction of their own, skipping those a pull holds, and only those
still ready (nobody's, their lease ended) are finished: a message leased again in between
is left to its puller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select, text

from clock_server.model import DEAD, DELIVERING, EXPIRED, PULL, RingRow
from clock_server.store.alarms import AlarmStore
from clock_server.store.events import write_events
from clock_server.store.pulls import (
    LEASE_COLUMNS,
    RETRY,
    RetryLimits,
    by_application,
    failed_lease_events,
    failure_unrecorded,
    finish_lapsed,
    pull_fate,
)
from clock_server.store.row_locks import RING_COLUMNS
from clock_server.store.schema import alarm_table, application_table
from clock_server.store.sql import id_list, translate_errors

_TABLE = alarm_table.name
_START = (-(2**62), 0)  # before every (next_try_time, id)


@dataclass(frozen=True, slots=True)
class Swept:
    """What one sweep found, by application: expired, dead, and failed leases recorded
    (`retried`: ready for the next pull)."""

    expired: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    retried: dict[str, int] = field(default_factory=dict)


class SqlPullSweep:
    """Finishes the lapsed messages of every application on the pull channel.

    `retry_max` is the server's default, for applications that set none; with
    `dead_letters`, a message that dies also gets a dead letter.
    """

    def __init__(
        self,
        store: AlarmStore,
        retry_max: int,
        dead_letters: bool,
        batch: int = 1_000,
        max_examined: int = 20_000,
    ) -> None:
        self.store = store
        self.retry_max = retry_max
        self.dead_letters = dead_letters
        self.batch = batch
        self.max_examined = max_examined
        self._resume: dict[str, tuple[int, int]] = {}  # where the last run stopped

    def sweep(self, now_ms: int) -> Swept:
        """Expire or kill, at `now_ms`, every pull message found ready (nobody's, its lease
        if any ended) past its cutoff or with its leases spent, and record the failure of
        every other lease ended unacked; how many of each, by application."""
        expired: list[RingRow] = []
        dead: list[RingRow] = []
        retried: list[RingRow] = []
        for application, retry in self._pull_applications().items():
            after = self._resume.pop(application, _START)
            examined = 0
            while True:
                read, candidates = self._candidates(application, retry, now_ms, after)
                if candidates:
                    gone, died, failed = self._finish(candidates, retry, now_ms)
                    expired += gone
                    dead += died
                    retried += failed
                if len(read) < self.batch:
                    break  # the end: the next run starts over
                after = read[-1]
                examined += len(read)
                if examined >= self.max_examined:
                    self._resume[application] = after
                    break
        return Swept(
            expired=by_application(expired),
            dead=by_application(dead),
            retried=by_application(retried),
        )

    def _pull_applications(self) -> dict[str, RetryLimits]:
        columns = (application_table.c.name, application_table.c.retry_max)
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(select(*columns).where(application_table.c.channel == PULL))
            return {
                name: RetryLimits(self.retry_max if retry_max is None else retry_max)
                for name, retry_max in rows
            }

    def _candidates(
        self, application: str, retry: RetryLimits, now_ms: int, after: tuple[int, int]
    ) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The next `batch` ready messages of `application` after `after`, read without locks
        as (next_try_time, id), and those of them that look lapsed."""
        hint = " FORCE INDEX (ix_clock_application_due)" if self.store.caps.index_hints else ""
        now = int(now_ms)
        query = text(
            f"SELECT next_try_time, id, retry_times, latest_ring_at, update_time"
            f" FROM {_TABLE}{hint}"
            f" WHERE application = :application AND status = '{DELIVERING}'"
            f" AND next_try_time <= {now} AND claimed_by = 0"
            f" AND (next_try_time > :at OR (next_try_time = :at AND id > :id))"
            f" ORDER BY next_try_time, id LIMIT {int(self.batch)}"
        )
        params = {"application": application, "at": after[0], "id": after[1]}
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(query, params).all()
        read = [(row[0], row[1]) for row in rows]
        lapsed = [
            (due, alarm_id)
            for due, alarm_id, retry_times, cutoff, updated in rows
            if retry_times > retry.max_retries
            or (cutoff is not None and cutoff < now)
            or failure_unrecorded(retry_times, due, updated)
        ]
        return read, lapsed

    def _finish(
        self, candidates: list[tuple[int, int]], retry: RetryLimits, now_ms: int
    ) -> tuple[list[RingRow], list[RingRow], list[RingRow]]:
        """Lock the candidates still ready, skipping those others hold, and finish or record
        those the decision says; (expired, dead, retried)."""
        by_id = " FORCE INDEX (PRIMARY)" if self.store.caps.index_hints else ""
        query = (
            f"SELECT {RING_COLUMNS}, {LEASE_COLUMNS} FROM {_TABLE}{by_id}"
            f" WHERE id IN ({id_list([alarm_id for _, alarm_id in candidates])})"
            f" AND status = '{DELIVERING}' AND claimed_by = 0"
            f" AND next_try_time <= {int(now_ms)}{self.store.caps.skip_locked_suffix}"
        )
        expired: list[RingRow] = []
        dead: list[RingRow] = []
        retried: list[RingRow] = []
        with translate_errors(), self.store.db.begin() as conn:
            for found in conn.exec_driver_sql(query).all():
                row = RingRow._make(found[:10])  # the version (found[10]) is not needed
                fate = pull_fate(row, now_ms, retry, failure_unrecorded(row[6], *found[11:13]))
                if fate == EXPIRED:
                    expired.append(row)
                elif fate == DEAD:
                    dead.append(row)
                elif fate == RETRY:
                    retried.append(row)
            finish_lapsed(conn, expired, dead, now_ms, self.dead_letters)
            if retried:
                # update_time at or after the lease's end: its failure is recorded.
                conn.exec_driver_sql(
                    f"UPDATE {_TABLE} SET update_time = {int(now_ms)}, version = version + 1"
                    f" WHERE id IN ({id_list([row.id for row in retried])})"
                )
                write_events(conn, failed_lease_events(retried, now_ms))
        return expired, dead, retried
