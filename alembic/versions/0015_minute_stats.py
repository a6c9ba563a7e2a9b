"""the clock_minute_stats table: alarms created, rung and failed, and the engine's lateness, by
minute and application

Every process adds what it counted to its (minute, application) row every few seconds; the
lateness is counted per fixed bucket (`lateness_le_<ms>`, then `lateness_over`) with its sum,
so that the rows of several processes add up to the service's histogram.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

import sqlalchemy as sa

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# As written by this revision; the server's buckets may only grow in a later one.
_BOUNDS_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000)
_BOUNDS_MS += (60_000, 300_000, 900_000, 3_600_000, 21_600_000, 86_400_000)
_COUNTERS = (
    "created",
    "rung",
    "failed",
    *(f"lateness_le_{bound}" for bound in _BOUNDS_MS),
    "lateness_over",
    "lateness_sum_ms",
)


def _key_collation() -> str | None:
    """The alarms' application column's collation (0001): binary and NO PAD."""
    dialect = op.get_bind().dialect
    if dialect.name != "mysql":
        return None
    return "utf8mb4_nopad_bin" if dialect.is_mariadb else "utf8mb4_0900_bin"


def upgrade() -> None:
    collation = _key_collation()
    op.create_table(
        "clock_minute_stats",
        sa.Column("minute", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("application", sa.String(64, collation=collation), primary_key=True),
        *(
            sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
            for name in _COUNTERS
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )


def downgrade() -> None:
    op.drop_table("clock_minute_stats")
