"""sealed webhook secrets: room for a secret encrypted with a key of CLOCK_SECRET_KEYS

A secret ("whsec_" and 44 characters) sealed with Fernet is "fernet:" and a token of 164
characters, more than the 128 the columns had. Rows stay as they are: plain secrets are still
read, and `clock-server reencrypt-secrets` seals them.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

import sqlalchemy as sa

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_COLUMNS = ("webhook_secret", "webhook_previous_secret")


def upgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        for column in _COLUMNS:
            batch.alter_column(
                column, existing_type=sa.String(128), type_=sa.String(255), existing_nullable=True
            )


def downgrade() -> None:
    with op.batch_alter_table("clock_application") as batch:
        for column in _COLUMNS:
            batch.alter_column(
                column, existing_type=sa.String(255), type_=sa.String(128), existing_nullable=True
            )
