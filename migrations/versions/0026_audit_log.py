"""audit log of administration and Standard Webhooks replay protection (issue 29): every admin call
recorded with actor, time, method and the ids it touched; the webhook-ids an inbound webhook
accepted within the replay window

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28 23:55:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0026'
down_revision = '0025'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('audit_log',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=True),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('actor_type', sa.String(length=16), nullable=False),
    sa.Column('actor', sa.String(length=200), nullable=False),
    sa.Column('key_id', sa.BigInteger(), nullable=True),
    sa.Column('method', sa.String(length=64), nullable=False),
    sa.Column('target_kind', sa.String(length=32), nullable=True),
    sa.Column('target_id', sa.String(length=255), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_audit_log_tenant_id_id', 'audit_log', ['tenant_id', 'id'])
    op.create_index('ix_audit_log_at', 'audit_log', ['at'])
    op.create_table('webhook_message_ids',
    sa.Column('id', BIG, nullable=False),
    sa.Column('route_id', BIG, nullable=False),
    sa.Column('message_id', sa.String(length=255), nullable=False),
    sa.Column('seen_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['route_id'], ['webhook_routes.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('route_id', 'message_id')
    )
    op.create_index('ix_webhook_message_ids_seen_at', 'webhook_message_ids', ['seen_at'])


def downgrade():
    op.drop_index('ix_webhook_message_ids_seen_at', table_name='webhook_message_ids')
    op.drop_table('webhook_message_ids')
    op.drop_index('ix_audit_log_at', table_name='audit_log')
    op.drop_index('ix_audit_log_tenant_id_id', table_name='audit_log')
    op.drop_table('audit_log')
