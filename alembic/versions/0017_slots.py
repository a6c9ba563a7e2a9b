"""slots: clock.slot, where an alarm lies among the slots engines share, and each engine's
slots in clock_engine, with the moves others made into them

An engine owns a contiguous range of the 1,024 slots and claims only their alarms, so that
engines share the work in equal parts and the console can show each one's share. New alarms
take their slot from a hash of their key; the alarms still to ring when this migration runs
take theirs from their id, which spreads them as evenly.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

import sqlalchemy as sa

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

SLOTS = 1024  # clock_server.slot_space.SLOTS when this migration was written


def upgrade() -> None:
    # With defaults, and last: MariaDB adds them in place, without a copy.
    with op.batch_alter_table("clock") as batch:
        batch.add_column(sa.Column("slot", sa.SmallInteger(), nullable=False, server_default="0"))
    with op.batch_alter_table("clock_engine") as batch:
        batch.add_column(sa.Column("slot_from", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("slot_to", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("moves", sa.BigInteger(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("moved_from", sa.BigInteger(), nullable=True))
    # Only the alarms an engine has still to claim or answer for: the others' slot is unread.
    op.execute(
        f"UPDATE clock SET slot = id % {SLOTS} WHERE status IN ('pending', 'delivering')"
    )


def downgrade() -> None:
    with op.batch_alter_table("clock_engine") as batch:
        batch.drop_column("moved_from")
        batch.drop_column("moves")
        batch.drop_column("slot_to")
        batch.drop_column("slot_from")
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("slot")
