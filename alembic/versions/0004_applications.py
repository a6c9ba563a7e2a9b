"""the registry of applications, shared rate buckets, and pending alarms per application

`clock_application` holds each application's limits, retry policy, default cutoff and
retention (every column NULL by default: no limit, the server's default). `clock_rate_bucket`
holds one token bucket per application and kind (creation, ringing) that every process
takes tokens from in chunks. The (application, status) index counts an application's
pending or dead alarms without reading its finished ones; claiming does not touch it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
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
    op.create_table(
        "clock_application",
        sa.Column("name", sa.String(64, collation=collation), primary_key=True),
        sa.Column("create_rate_per_s", sa.Double(), nullable=True),
        sa.Column("create_burst", sa.Integer(), nullable=True),
        sa.Column("max_pending", sa.BigInteger(), nullable=True),
        sa.Column("ring_rate_per_s", sa.Double(), nullable=True),
        sa.Column("ring_burst", sa.Integer(), nullable=True),
        sa.Column("retry_base_s", sa.Double(), nullable=True),
        sa.Column("retry_cap_s", sa.Double(), nullable=True),
        sa.Column("retry_max", sa.Integer(), nullable=True),
        sa.Column("default_cutoff_ms", sa.BigInteger(), nullable=True),
        sa.Column("retention_days", sa.Double(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )
    op.create_table(
        "clock_rate_bucket",
        sa.Column("application", sa.String(64, collation=collation), primary_key=True),
        sa.Column("kind", sa.String(16), primary_key=True),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.Column("refilled_at", sa.BigInteger(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
        mysql_collate=collation,
    )
    op.create_index("ix_clock_application_status", "clock", ["application", "status"])


def downgrade() -> None:
    op.drop_index("ix_clock_application_status", table_name="clock")
    op.drop_table("clock_rate_bucket")
    op.drop_table("clock_application")
