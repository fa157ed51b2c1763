"""messenger channels: channel credentials and registration, inbound receipts, unreachable chats,
the messenger's id and receipt of a delivery, a message's non-text content

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 09:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    with op.batch_alter_table('channels', schema=None) as batch_op:
        batch_op.add_column(sa.Column('inbound_key', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('connection', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('registered_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('last_error', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('last_error_at', sa.DateTime(), nullable=True))
        batch_op.create_unique_constraint('uq_channels_type_inbound_key', ['type', 'inbound_key'])
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('external_id', sa.String(length=255), nullable=True))
        batch_op.add_column(sa.Column('receipt', sa.String(length=16), nullable=True))
        batch_op.create_index('ix_deliveries_channel_external_id', ['channel_id', 'external_id'], unique=False)
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('content', sa.JSON(), nullable=True))
    op.create_table('inbound_receipts',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('channel_id', BIG, nullable=False),
    sa.Column('external_id', sa.String(length=300), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['channel_id'], ['channels.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('channel_id', 'external_id', name='uq_inbound_receipts_channel_external')
    )
    with op.batch_alter_table('inbound_receipts', schema=None) as batch_op:
        batch_op.create_index('ix_inbound_receipts_created_at', ['created_at'], unique=False)
    op.create_table('unreachable_chats',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('channel_id', BIG, nullable=False),
    sa.Column('chat_id', sa.String(length=255), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('since', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['channel_id'], ['channels.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('channel_id', 'chat_id', name='uq_unreachable_chats_channel_chat')
    )


def downgrade():
    op.drop_table('unreachable_chats')
    with op.batch_alter_table('inbound_receipts', schema=None) as batch_op:
        batch_op.drop_index('ix_inbound_receipts_created_at')
    op.drop_table('inbound_receipts')
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_column('content')
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_channel_external_id')
        batch_op.drop_column('receipt')
        batch_op.drop_column('external_id')
    with op.batch_alter_table('channels', schema=None) as batch_op:
        batch_op.drop_constraint('uq_channels_type_inbound_key', type_='unique')
        batch_op.drop_column('last_error_at')
        batch_op.drop_column('last_error')
        batch_op.drop_column('registered_at')
        batch_op.drop_column('connection')
        batch_op.drop_column('inbound_key')
