"""count-triggered alarms: clock.ring_after_count and clock.counted, and clock_count_increment

An alarm created with `ring_after_count` N rings as soon as N operations were counted on it
(POST .../count), or at its target, whichever comes first. `counted` holds the count so far.
`clock_count_increment` remembers each increment_id counted on an alarm, so that a repeated
one is not counted twice; the retention purge deletes its rows with their alarm.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _key_collation() -> str | None:
    """Binary and NO PAD, as for business ids: increment ids are compared exactly."""
    dialect = op.get_bind().dialect
    if dialect.name != "mysql":
        return None
    return "utf8mb4_nopad_bin" if dialect.is_mariadb else "utf8mb4_0900_bin"


def upgrade() -> None:
    # Nullable or with a default, and last: MariaDB adds them in place, without a copy.
    with op.batch_alter_table("clock") as batch:
        batch.add_column(sa.Column("ring_after_count", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("counted", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "clock_count_increment",
        sa.Column("alarm_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column(
            "increment_id", sa.String(128, collation=_key_collation()), primary_key=True
        ),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("clock_count_increment")
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("counted")
        batch.drop_column("ring_after_count")
