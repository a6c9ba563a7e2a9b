"""the clock_dead_letter table: dead alarms waiting to be published to the dead-letter exchange

A ring batch that marks alarms dead adds one row for each in the same transaction, holding the
alarm as it was when it died and its last error. The dead-letter relay, run by one server at a
time, publishes the rows in id order with publisher confirms and deletes the confirmed ones, so
a dead letter is published at least once even when the broker was down when the alarm died.
Rows leave as soon as they are published: the table stays small.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

# SQLite only auto-increments an INTEGER PRIMARY KEY, so the id is INTEGER there.
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_PAYLOAD = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "clock_dead_letter",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("alarm_id", sa.BigInteger(), nullable=False),
        sa.Column("application", sa.String(64), nullable=False),
        sa.Column("business_id", sa.String(128), nullable=False),
        sa.Column("payload", _PAYLOAD, nullable=False),
        sa.Column("target_ring_at", sa.BigInteger(), nullable=False),
        sa.Column("latest_ring_at", sa.BigInteger(), nullable=True),
        sa.Column("died_at", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("clock_dead_letter")
