"""delivery channels: each application's channel (amqp, webhook or pull) and its settings

An application whose channel is `webhook` gets each alarm as a signed POST to `webhook_url`
(`webhook_secret` signs it, per the Standard Webhooks specification); one whose channel is
`pull` leases its alarms over HTTP. Alarms handed to either are in the status `delivering`
until answered or acked; the status column already holds any short word, so the alarms'
table does not change.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25
"""

import sqlalchemy as sa

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        batch.add_column(
            sa.Column("channel", sa.String(16), nullable=False, server_default="amqp")
        )
        batch.add_column(sa.Column("webhook_url", sa.String(2048), nullable=True))
        batch.add_column(sa.Column("webhook_secret", sa.String(128), nullable=True))
        batch.add_column(sa.Column("webhook_timeout_s", sa.Double(), nullable=True))
        batch.add_column(sa.Column("webhook_max_in_flight", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pull_visibility_s", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        for column in (
            "pull_visibility_s",
            "webhook_max_in_flight",
            "webhook_timeout_s",
            "webhook_secret",
            "webhook_url",
            "channel",
        ):
            batch.drop_column(column)
