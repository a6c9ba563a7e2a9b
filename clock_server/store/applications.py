"""The registry of applications on SQL, and a cache of it that every process refreshes
(the interface the engine sees is store.ports.ApplicationPolicies)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping

from sqlalchemy import and_, func, select, update
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from clock_server.errors import NotFound, Unavailable
from clock_server.model import (
    DEAD,
    PENDING,
    POLICY_FIELDS,
    ApplicationCounts,
    ApplicationPolicy,
)
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import alarm_table, application_table
from clock_server.store.secret_box import SecretBox, SecretUnreadable
from clock_server.store.sql import translate_errors

log = logging.getLogger(__name__)

_NEXT_MINUTE_MS = 60_000


class SqlApplicationRegistry:
    """One row per application in `clock_application`. Its webhook secrets are stored
    sealed by `box` (see secret_box) and read back in the clear."""

    def __init__(self, store: AlarmStore, box: SecretBox | None = None) -> None:
        self.store = store
        self.box = box or SecretBox()

    def get(self, name: str) -> ApplicationPolicy:
        """The application's row; NotFound when it is not registered."""
        query = select(application_table).where(application_table.c.name == name)
        with translate_errors(), self.store.db.connect() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise NotFound(f"no application {name!r} is registered")
        return self._policy(row._mapping)

    def all(self) -> list[ApplicationPolicy]:
        """Every registered application, by name."""
        query = select(application_table).order_by(application_table.c.name)
        with translate_errors(), self.store.db.connect() as conn:
            return [self._policy(row._mapping) for row in conn.execute(query)]

    def register(self, name: str, now_ms: int) -> bool:
        """Add the application with no limits unless it is there; True when added."""
        values = {"name": name, "created_at": now_ms, "updated_at": now_ms}
        dialect = self.store.db.dialect.name
        maker = sqlite_insert if dialect == "sqlite" else mysql_insert
        statement = (
            maker(application_table)
            .values(**values)
            .prefix_with("OR IGNORE" if dialect == "sqlite" else "IGNORE")
        )
        with translate_errors(), self.store.db.begin() as conn:
            return conn.execute(statement).rowcount == 1

    def put(self, policy: ApplicationPolicy, now_ms: int) -> tuple[ApplicationPolicy, bool]:
        """Set every setting of the application, registering it if needed; True when added."""
        added = self.register(policy.name, now_ms)
        values = {name: getattr(policy, name) for name in POLICY_FIELDS}
        with translate_errors(), self.store.db.begin() as conn:
            conn.execute(
                update(application_table)
                .where(application_table.c.name == policy.name)
                .values(**values, updated_at=now_ms)
            )
        return self.get(policy.name), added

    def update(
        self,
        name: str,
        changes: Mapping[str, object],
        now_ms: int,
        check: Callable[[ApplicationPolicy], None] | None = None,
    ) -> ApplicationPolicy:
        """Change only the settings in `changes` (None clears one), under the row's lock, so
        two changes of different settings both land. `check` sees the application as it
        would be and may raise to change nothing. NotFound when it is not registered."""
        unknown = set(changes) - set(POLICY_FIELDS)
        if unknown:
            raise ValueError(f"not settings of an application: {sorted(unknown)}")
        query = select(application_table).where(application_table.c.name == name)
        locked = query.with_for_update() if self.store.caps.row_locks else query
        with translate_errors(), self.store.db.begin() as conn:
            row = conn.execute(locked).first()
            if row is None:
                raise NotFound(f"no application {name!r} is registered")
            if check is not None:
                check(dataclasses.replace(self._policy(row._mapping), **changes))  # type: ignore[arg-type]
            conn.execute(
                update(application_table)
                .where(application_table.c.name == name)
                .values(**changes, updated_at=now_ms)
            )
            return self._policy(conn.execute(query).one()._mapping)

    def set_secret(
        self,
        name: str,
        secret: str,
        now_ms: int,
        only_if_unset: bool = False,
        previous_until_ms: int | None = None,
    ) -> ApplicationPolicy:
        """Set the secret that signs the application's webhooks (with `only_if_unset`, only
        when it has none, so two first settings agree). With `previous_until_ms`, the secret
        it replaces goes on signing beside it until then; without, it stops at once.
        NotFound when it is not registered. The secrets are stored sealed (`box`)."""
        c = application_table.c
        query = select(c.webhook_secret).where(c.name == name)
        locked = query.with_for_update() if self.store.caps.row_locks else query
        with translate_errors(), self.store.db.begin() as conn:
            row = conn.execute(locked).first()
            if row is None:
                raise NotFound(f"no application {name!r} is registered")
            current = row[0]
            if not (only_if_unset and current is not None):
                keep = previous_until_ms is not None and current is not None
                conn.execute(
                    update(application_table)
                    .where(c.name == name)
                    .values(
                        webhook_secret=self.box.seal(secret),
                        webhook_previous_secret=current if keep else None,
                        webhook_previous_secret_until=previous_until_ms if keep else None,
                        updated_at=now_ms,
                    )
                )
        return self.get(name)

    def _policy(self, row: object) -> ApplicationPolicy:
        """The application's policy with its secrets in the clear; a secret no key opens
        is read as none (and logged), so that the rest of the registry is still read."""
        mapping = dict(row)  # type: ignore[call-overload]
        for column in ("webhook_secret", "webhook_previous_secret"):
            try:
                mapping[column] = self.box.open(mapping.get(column))
            except SecretUnreadable as error:
                log.error("application %r: %s", mapping.get("name"), error,
                          extra={"action": "webhook_secret_unreadable"})  # fmt: skip
                mapping[column] = None
        return _policy(mapping)

    def counts(self, now_ms: int, name: str | None = None) -> dict[str, ApplicationCounts]:
        """Pending, due within a minute, overdue and dead alarms of each application that has
        any, or of `name` alone. Pending and dead come from the (application, status) index;
        the due ones from the (status, next_try_time) index, so finished alarms are not
        read."""
        c = alarm_table.c
        only = [c.application == name] if name is not None else []
        by_status = (
            select(c.application, c.status, func.count())
            .where(c.status.in_((PENDING, DEAD)), *only)
            .group_by(c.application, c.status)
        )
        soon = (
            select(c.application, func.count())
            .where(and_(c.status == PENDING, c.next_try_time <= now_ms + _NEXT_MINUTE_MS, *only))
            .group_by(c.application)
        )
        overdue = (
            select(c.application, func.count())
            .where(and_(c.status == PENDING, c.next_try_time < now_ms, *only))
            .group_by(c.application)
        )
        tallies: dict[str, dict[str, int]] = {}
        with translate_errors(), self.store.db.connect() as conn:
            for application, status, count in conn.execute(by_status):
                tallies.setdefault(application, {})[status] = int(count)
            for application, count in conn.execute(soon):
                tallies.setdefault(application, {})["soon"] = int(count)
            for application, count in conn.execute(overdue):
                tallies.setdefault(application, {})["overdue"] = int(count)
        return {
            name: ApplicationCounts(
                pending=t.get(PENDING, 0),
                due_next_minute=t.get("soon", 0) - t.get("overdue", 0),
                overdue=t.get("overdue", 0),
                dead=t.get(DEAD, 0),
            )
            for name, t in tallies.items()
        }

    def names_with_alarms(self) -> list[str]:
        """Every application that has alarms: a DISTINCT that MariaDB answers by skipping
        through an index that leads with the application, without counting."""
        query = select(alarm_table.c.application).distinct()
        with translate_errors(), self.store.db.connect() as conn:
            return [row[0] for row in conn.execute(query)]

    def pending_counts(self) -> dict[str, int]:
        """Each application with pending alarms, and how many: one GROUP BY over the
        (application, status, next_try_time) index, for clock_pending_alarms."""
        c = alarm_table.c
        query = select(c.application, func.count()).where(c.status == PENDING)
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(query.group_by(c.application)).all()
        return {application: int(count) for application, count in rows}

    def count_pending(self, name: str) -> int:
        """The application's pending alarms, read from the (application, status) index."""
        c = alarm_table.c
        query = select(func.count()).where(and_(c.application == name, c.status == PENDING))
        with translate_errors(), self.store.db.connect() as conn:
            return int(conn.execute(query).scalar_one())


class CachedPolicies:
    """Every application's policy, read again from the registry every `refresh_ms`, so a
    change made on one process takes effect on all within that time. An application not in
    the registry has no limits. Thread-safe; a failed refresh keeps the last good copy."""

    def __init__(
        self,
        load: Callable[[], list[ApplicationPolicy]],
        now_ms: Callable[[], int],
        refresh_ms: int,
    ) -> None:
        self._load = load
        self._now_ms = now_ms
        self.refresh_ms = refresh_ms
        self._policies: dict[str, ApplicationPolicy] = {}
        self._loaded_at_ms: int | None = None
        self._lock = threading.Lock()

    def policy(self, name: str) -> ApplicationPolicy:
        """The application's policy as of at most `refresh_ms` ago."""
        self._refresh_if_old()
        found = self._policies.get(name)
        return found if found is not None else ApplicationPolicy(name=name)

    def all(self) -> list[ApplicationPolicy]:
        """Every registered application's policy as of at most `refresh_ms` ago."""
        self._refresh_if_old()
        return list(self._policies.values())

    def known(self, name: str) -> bool:
        """Whether the application was registered as of at most `refresh_ms` ago."""
        self._refresh_if_old()
        return name in self._policies

    def listed(self, name: str) -> bool:
        """Whether the application was registered as of the last reading, without reading
        the registry again (SQLite would wait for a ring batch's own write lock)."""
        return name in self._policies

    def remember(self, policy: ApplicationPolicy) -> None:
        """Take a policy this process has just written, without waiting for the refresh."""
        with self._lock:
            self._policies = {**self._policies, policy.name: policy}

    def invalidate(self) -> None:
        """Read the registry again on the next lookup."""
        with self._lock:
            self._loaded_at_ms = None

    def _refresh_if_old(self) -> None:
        now_ms = self._now_ms()
        loaded = self._loaded_at_ms
        if loaded is not None and now_ms - loaded < self.refresh_ms:
            return
        with self._lock:
            if self._loaded_at_ms is not None and now_ms - self._loaded_at_ms < self.refresh_ms:
                return
            try:
                self._policies = {p.name: p for p in self._load()}
            except Unavailable:
                if self._loaded_at_ms is None:
                    raise
                # Keep the last copy; read again after another interval, not on every lookup.
            self._loaded_at_ms = now_ms


def _policy(row: object) -> ApplicationPolicy:
    mapping = dict(row)  # type: ignore[call-overload]
    names = {f.name for f in dataclasses.fields(ApplicationPolicy)}
    return ApplicationPolicy(**{k: v for k, v in mapping.items() if k in names})
