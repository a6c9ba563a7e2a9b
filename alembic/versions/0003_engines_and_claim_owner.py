"""the clock_engine table of live engines, and the engine that holds each claim

An engine that dies leaves its claims leased until the lease ends (30 s by default). With
each claim's owner recorded and every engine beating in `clock_engine`, a survivor or a
restarted process gives a silent engine's claims back within seconds. The owner is an
integer with a default, so that writing it does not grow the row (finding 27).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("clock") as batch:
        batch.add_column(
            sa.Column("claimed_by", sa.Integer(), nullable=False, server_default="0")
        )
    op.create_table(
        "clock_engine",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("instance_id", sa.String(128), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("heartbeat_at", sa.BigInteger(), nullable=False),
        sa.Column("lease_ms", sa.BigInteger(), nullable=False),
        sa.Column("dead_at", sa.BigInteger(), nullable=True),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("clock_engine")
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("claimed_by")
