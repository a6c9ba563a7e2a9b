"""fixed-size ring columns: rung_at NOT NULL DEFAULT 0, status CHAR(10)

Ringing an alarm wrote rung_at over a NULL and status 'rung' over 'pending'. A NULL takes no
room in an InnoDB row, so each rung row grew by 8 bytes in a page the inserts had filled, and
MariaDB split and reorganized pages: about 1.7 KB of redo and 28 us of its CPU per rung alarm
against 0.25 KB and 16 us with columns that keep their size (docs/perf/findings.md, finding
44). The same held for the hand-off to a webhook or pullers ('pending' -> 'delivering').
Now rung_at is 0 until the alarm rings (the store reads 0 as "not rung") and status is a
CHAR(10), the longest status, so every status change rewrites the row in place.

On MariaDB this updates every alarm not yet rung in one transaction and then rebuilds the
clock table (one ALTER TABLE, which changes a column's type and so copies the table while
writes to it wait): a large table takes minutes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25
"""

import sqlalchemy as sa

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE clock SET rung_at = 0 WHERE rung_at IS NULL")
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        op.execute(
            "ALTER TABLE clock MODIFY rung_at BIGINT NOT NULL DEFAULT 0,"
            " MODIFY status CHAR(10) NOT NULL"
        )
        return
    with op.batch_alter_table("clock") as batch:
        batch.alter_column(
            "rung_at", existing_type=sa.BigInteger(), nullable=False, server_default="0"
        )
        batch.alter_column("status", existing_type=sa.String(16), type_=sa.CHAR(10))


def downgrade() -> None:
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        op.execute(
            "ALTER TABLE clock MODIFY rung_at BIGINT NULL DEFAULT NULL,"
            " MODIFY status VARCHAR(16) NOT NULL"
        )
    else:
        with op.batch_alter_table("clock") as batch:
            batch.alter_column(
                "rung_at", existing_type=sa.BigInteger(), nullable=True, server_default=None
            )
            batch.alter_column("status", existing_type=sa.CHAR(10), type_=sa.String(16))
    op.execute("UPDATE clock SET rung_at = NULL WHERE rung_at = 0")
