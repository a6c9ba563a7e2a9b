"""the clock_schedule table: recurring schedules, whose occurrences ring as alarms

A schedule is a cron expression or an interval in an IANA time zone. The planner makes each
occurrence an alarm of the clock table a short while before it is due, under a key derived
from the schedule and the occurrence's time, and moves `next_at` on past it in the same
transaction; the (paused, next_at) index is what the planner reads.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

import sqlalchemy as sa

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def _key_collation() -> str | None:
    """The alarms' application column's collation (0001): binary and NO PAD."""
    dialect = op.get_bind().dialect
    if dialect.name != "mysql":
        return None
    return "utf8mb4_nopad_bin" if dialect.is_mariadb else "utf8mb4_0900_bin"


def upgrade() -> None:
    collation = _key_collation()
    payload = sa.Text().with_variant(sa.dialects.mysql.MEDIUMTEXT(), "mysql", "mariadb")
    op.create_table(
        "clock_schedule",
        sa.Column("application", sa.String(64, collation=collation), primary_key=True),
        sa.Column("schedule_id", sa.String(64, collation=collation), primary_key=True),
        sa.Column("cron", sa.String(255), nullable=True),
        sa.Column("every_s", sa.BigInteger(), nullable=True),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("payload", payload, nullable=False),
        sa.Column("start_at", sa.BigInteger(), nullable=False),
        sa.Column("end_at", sa.BigInteger(), nullable=True),
        sa.Column("cutoff_ms", sa.BigInteger(), nullable=True),
        sa.Column("catch_up", sa.String(8), nullable=False),
        sa.Column("catch_up_max", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        # The first occurrence not yet made an alarm; NULL once the schedule has ended.
        sa.Column("next_at", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("create_time", sa.BigInteger(), nullable=False),
        sa.Column("update_time", sa.BigInteger(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )
    op.create_index("ix_clock_schedule_next_at", "clock_schedule", ["paused", "next_at"])


def downgrade() -> None:
    op.drop_index("ix_clock_schedule_next_at", table_name="clock_schedule")
    op.drop_table("clock_schedule")
