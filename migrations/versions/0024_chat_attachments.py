"""chat attachments (issue 28): the files customers send through a messenger, fetched through Baton

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-28 23:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0024'
down_revision = '0023'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('chat_attachments',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('channel_id', BIG, nullable=False),
    sa.Column('conversation_id', BIG, nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('mime_type', sa.String(length=255), nullable=True),
    sa.Column('size', BIG, nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['channel_id'], ['channels.id'], ),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_chat_attachments_conversation_id', 'chat_attachments', ['conversation_id'])


def downgrade():
    op.drop_index('ix_chat_attachments_conversation_id', table_name='chat_attachments')
    op.drop_table('chat_attachments')
