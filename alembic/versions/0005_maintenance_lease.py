"""the clock_job_lease table: a periodic job that several servers schedule runs on one at a time

The retention purge deletes finished alarms once past their retention. Every server schedules
it, and the one holding the job's lease (a conditional UPDATE of its row) runs it; the others
skip until the lease lapses.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clock_job_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("until_ms", sa.BigInteger(), nullable=False),
        mysql_engine="InnoDB",
        mysql_charset="utf8mb4",
    )


def downgrade() -> None:
    op.drop_table("clock_job_lease")
