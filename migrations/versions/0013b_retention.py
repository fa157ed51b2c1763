"""retention (issue 13): indexes that let the purge find what ended long ago without a scan

Revision ID: 0013b
Revises: 0012
Create Date: 2026-11-24 09:30:00.000000

"""
from alembic import op


# revision identifiers, used by Alembic.
revision = '0013b'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.create_index('ix_instances_tenant_completed_at', ['tenant_id', 'completed_at'], unique=False)
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_deliveries_tenant_status_sent_at', ['tenant_id', 'status', 'sent_at'], unique=False)
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.create_index('ix_messages_delivery_id', ['delivery_id'], unique=False)


def downgrade():
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_index('ix_messages_delivery_id')
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_tenant_status_sent_at')
    with op.batch_alter_table('instances', schema=None) as batch_op:
        batch_op.drop_index('ix_instances_tenant_completed_at')
