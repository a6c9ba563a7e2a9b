"""webhook secret overlap: the secret a rotation replaced keeps signing for a while

After `POST /v1/applications/{application}/webhook-secret`, webhooks carry a signature with
the new secret and one with the previous secret (Standard Webhooks allows several) until
`webhook_previous_secret_until` (epoch ms), so that receivers can move to the new secret
without rejecting a call.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25
"""

import sqlalchemy as sa

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        batch.add_column(sa.Column("webhook_previous_secret", sa.String(128), nullable=True))
        batch.add_column(sa.Column("webhook_previous_secret_until", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        batch.drop_column("webhook_previous_secret_until")
        batch.drop_column("webhook_previous_secret")
