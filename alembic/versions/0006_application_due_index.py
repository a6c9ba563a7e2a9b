"""the (application, status, next_try_time) index: an application's earliest due rows

While one application's backlog is larger than an engine's heap, the engine claims the other
applications' due rows by this index, each application's earliest first, and finds which
applications have rows due by reading each one's earliest pending next_try_time (a loose
index scan). It replaces the (application, status) index, which it covers: counting an
application's pending and dead rows reads the same entries.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_clock_application_due", "clock", ["application", "status", "next_try_time"]
    )
    op.drop_index("ix_clock_application_status", table_name="clock")


def downgrade() -> None:
    op.create_index("ix_clock_application_status", "clock", ["application", "status"])
    op.drop_index("ix_clock_application_due", table_name="clock")
