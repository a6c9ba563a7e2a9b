"""re-drives: clock.redrives, how many times an operator re-drove an alarm

From the first re-drive on, an alarm's message id (the AMQP message_id and the webhook-id)
is "<id>-r<n>" instead of "<id>": a receiver that deduplicated the earlier delivery takes the
re-driven one.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

import sqlalchemy as sa

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # With a default, and last: MariaDB adds it in place, without a copy.
    with op.batch_alter_table("clock") as batch:
        batch.add_column(sa.Column("redrives", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("clock") as batch:
        batch.drop_column("redrives")
