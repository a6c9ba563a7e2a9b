"""the slot in the indexes of due rows: (status, next_try_time, id, slot) and (application,
status, next_try_time, id, slot), under the same names

An engine reads the due rows of its own slots, and each group of them on its own connection
(engine.slot_groups): with the slot in the index entry, the database filters the other slots'
rows on the index alone (index condition pushdown) instead of reading each row to look at
its slot; the id before it keeps the entries in the (next_try_time, id) order the reading
follows. Each index is replaced in one statement on MariaDB and MySQL, which build the new
one in place while the table stays open to reads and writes.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_clock_status_next_try_time": (["status", "next_try_time"], ["id", "slot"]),
    "ix_clock_application_due": (["application", "status", "next_try_time"], ["id", "slot"]),
}


def upgrade() -> None:
    for name, (columns, added) in INDEXES.items():
        _replace(name, columns + added)


def downgrade() -> None:
    for name, (columns, _) in INDEXES.items():
        _replace(name, columns)


def _replace(name: str, columns: list[str]) -> None:
    if op.get_context().dialect.name == "mysql":
        op.execute(f"ALTER TABLE clock DROP INDEX {name}, ADD INDEX {name} ({', '.join(columns)})")
    else:
        op.drop_index(name, table_name="clock")
        op.create_index(name, "clock", columns)
