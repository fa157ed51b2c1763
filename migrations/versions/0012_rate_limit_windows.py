"""rate-limit windows (issue 13): one row per API key or webhook being limited; UNLOGGED on PostgreSQL

Revision ID: 0012
Revises: 0009
Create Date: 2026-11-25 09:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0012'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade():
    # Counts of the current second need no crash safety: an unlogged table skips the WAL and its flush.
    unlogged = ["UNLOGGED"] if op.get_bind().dialect.name == "postgresql" else []
    op.create_table('rate_limit_windows',
    sa.Column('bucket', sa.String(length=80), nullable=False),
    sa.Column('window_end', sa.BigInteger(), nullable=False),
    sa.Column('hits', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('bucket'),
    prefixes=unlogged
    )


def downgrade():
    op.drop_table('rate_limit_windows')
