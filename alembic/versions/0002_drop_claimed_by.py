"""drop clock.claimed_by

Writing the claiming server's name into every claimed row made the claim's UPDATE grow each
row, about 13 us of MariaDB's time per alarm (docs/perf/findings.md, finding 27); safe claiming
needs only the lease in next_try_time and the version.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("claimed_by")


def downgrade() -> None:
    with op.batch_alter_table("clock") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(80), nullable=True))
