"""instance history (issue 26): the append-only timeline of what happened to each instance and who did it

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 23:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('history_events',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('element_id', sa.String(length=255), nullable=True),
    sa.Column('actor', sa.JSON(), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_history_events_instance_id', 'history_events', ['instance_id', 'id'], unique=False)


def downgrade():
    op.drop_index('ix_history_events_instance_id', table_name='history_events')
    op.drop_table('history_events')
