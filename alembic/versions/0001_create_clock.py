"""create the clock table

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_PAYLOAD = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


def _key_collation() -> str | None:
    """Binary and NO PAD, so keys are case-sensitive and trailing spaces count."""
    dialect = op.get_bind().dialect
    if dialect.name != "mysql":
        return None
    return "utf8mb4_nopad_bin" if dialect.is_mariadb else "utf8mb4_0900_bin"


def upgrade() -> None:
    collation = _key_collation()
    op.create_table(
        "clock",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("application", sa.String(64, collation=collation), nullable=False),
        sa.Column("business_id", sa.String(128, collation=collation), nullable=False),
        sa.Column("payload", _PAYLOAD, nullable=False),
        sa.Column("target_ring_at", sa.BigInteger(), nullable=False),
        sa.Column("latest_ring_at", sa.BigInteger(), nullable=True),
        sa.Column("next_try_time", sa.BigInteger(), nullable=False),
        sa.Column("retry_times", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("rung_at", sa.BigInteger(), nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("claimed_by", sa.String(80), nullable=True),
        sa.Column("create_time", sa.BigInteger(), nullable=False),
        sa.Column("update_time", sa.BigInteger(), nullable=False),
        sa.UniqueConstraint(
            "application", "business_id", name="uq_clock_application_business_id"
        ),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )
    op.create_index("ix_clock_status_next_try_time", "clock", ["status", "next_try_time"])
    op.create_index("ix_clock_application_id", "clock", ["application", "id"])


def downgrade() -> None:
    op.drop_index("ix_clock_application_id", table_name="clock")
    op.drop_index("ix_clock_status_next_try_time", table_name="clock")
    op.drop_table("clock")
