"""The webhook secrets of every application as stored: which no key opens, and bringing them
all under the first key of CLOCK_SECRET_KEYS (`clock-server reencrypt-secrets`)."""

from __future__ import annotations

from sqlalchemy import select, update

from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import application_table
from clock_server.store.secret_box import SecretBox, SecretUnreadable
from clock_server.store.sql import translate_errors

SECRET_COLUMNS = ("webhook_secret", "webhook_previous_secret")


class StoredSecrets:
    """The sealed secrets of `clock_application`, seen through `box`."""

    def __init__(self, store: AlarmStore, box: SecretBox) -> None:
        self.store = store
        self.box = box

    def unreadable(self) -> list[str]:
        """The applications with a stored secret that none of the box's keys opens."""
        c = application_table.c
        query = select(c.name, c.webhook_secret, c.webhook_previous_secret).order_by(c.name)
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(query).all()
        return [row[0] for row in rows if not all(self._opens(value) for value in row[1:])]

    def reseal(self) -> int:
        """Store every secret as a write would now (sealed with the box's first key), one
        application at a time under its row's lock; how many applications changed.
        SecretUnreadable for a secret no key opens (those before it stay changed)."""
        c = application_table.c
        with translate_errors(), self.store.db.connect() as conn:
            names = list(conn.execute(select(c.name).order_by(c.name)).scalars())
        changed = 0
        for name in names:
            query = select(c.webhook_secret, c.webhook_previous_secret).where(c.name == name)
            locked = query.with_for_update() if self.store.caps.row_locks else query
            with translate_errors(), self.store.db.begin() as conn:
                row = conn.execute(locked).first()
                if row is None or all(self.box.is_current(value) for value in row):
                    continue
                values = {
                    column: self.box.reseal(value)
                    for column, value in zip(SECRET_COLUMNS, row, strict=True)
                }
                conn.execute(update(application_table).where(c.name == name).values(**values))
                changed += 1
        return changed

    def _opens(self, stored: str | None) -> bool:
        try:
            self.box.open(stored)
        except SecretUnreadable:
            return False
        return True
