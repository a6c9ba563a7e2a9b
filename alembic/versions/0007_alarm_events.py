"""the clock_event table: each alarm's history, and who created each alarm

`clock_event` holds the events of an alarm that its row does not tell: moves and changes,
a cancel, each failed publish, expiry, death, a re-drive. Its (alarm_id, id) index reads one
alarm's events in order and finds those the retention purge deletes with their alarm.
`clock.created_by` names who created the alarm (NULL for alarms created before this
revision): the "created" event and the ring are read from the alarm row, not written twice.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# SQLite only auto-increments an INTEGER PRIMARY KEY, so the id is INTEGER there.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "clock_event",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("alarm_id", sa.BigInteger(), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(64), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )
    op.create_index("ix_clock_event_alarm_id_id", "clock_event", ["alarm_id", "id"])
    # Nullable and last: MariaDB adds it in place, without copying the table.
    with op.batch_alter_table("clock") as batch:
        batch.add_column(sa.Column("created_by", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("created_by")
    op.drop_index("ix_clock_event_alarm_id_id", table_name="clock_event")
    op.drop_table("clock_event")
