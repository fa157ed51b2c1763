"""instance steps (issue 15): the path rows of what a save pruned from an instance's task tree

Revision ID: 0015
Revises: 0013b
Create Date: 2026-11-24 10:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0015'
down_revision = '0013b'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('instance_steps',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('steps', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('instance_steps', schema=None) as batch_op:
        batch_op.create_index('ix_instance_steps_instance_id', ['instance_id', 'id'], unique=False)


def downgrade():
    with op.batch_alter_table('instance_steps', schema=None) as batch_op:
        batch_op.drop_index('ix_instance_steps_instance_id')
    op.drop_table('instance_steps')
