"""external tasks, event subscriptions (messages and signals between instances), DMN files of a definition

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-24 09:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0009'
down_revision = '0007'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('external_tasks',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('definition_id', BIG, nullable=False),
    sa.Column('spiff_task_id', sa.String(length=36), nullable=False),
    sa.Column('element_id', sa.String(length=255), nullable=False),
    sa.Column('topic', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('variables', sa.JSON(), nullable=False),
    sa.Column('worker_id', sa.String(length=64), nullable=True),
    sa.Column('lock_expires_at', sa.DateTime(), nullable=True),
    sa.Column('retries', sa.Integer(), nullable=True),
    sa.Column('retry_at', sa.DateTime(), nullable=True),
    sa.Column('error_message', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('completed_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['definition_id'], ['definitions.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('instance_id', 'spiff_task_id')
    )
    with op.batch_alter_table('external_tasks', schema=None) as batch_op:
        batch_op.create_index('ix_external_tasks_fetch', ['tenant_id', 'status', 'topic', 'id'], unique=False)
        batch_op.create_index('ix_external_tasks_tenant_instance_id', ['tenant_id', 'instance_id', 'id'],
                              unique=False)
    op.create_table('event_subscriptions',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('element_id', sa.String(length=255), nullable=False),
    sa.Column('correlation', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('event_subscriptions', schema=None) as batch_op:
        batch_op.create_index('ix_event_subscriptions_name', ['tenant_id', 'kind', 'name'], unique=False)
        batch_op.create_index('ix_event_subscriptions_instance_id', ['instance_id'], unique=False)
    with op.batch_alter_table('definitions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('dmn_xml', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('definitions', schema=None) as batch_op:
        batch_op.drop_column('dmn_xml')
    with op.batch_alter_table('event_subscriptions', schema=None) as batch_op:
        batch_op.drop_index('ix_event_subscriptions_instance_id')
        batch_op.drop_index('ix_event_subscriptions_name')
    op.drop_table('event_subscriptions')
    with op.batch_alter_table('external_tasks', schema=None) as batch_op:
        batch_op.drop_index('ix_external_tasks_tenant_instance_id')
        batch_op.drop_index('ix_external_tasks_fetch')
    op.drop_table('external_tasks')
