"""messengers for a business (issue 28, points 1-3, 7): when the customer last wrote (WhatsApp's
24-hour window), and the pace of sending shared by every worker process

Revision ID: 0023
Revises: 0020
Create Date: 2026-11-28 23:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0023'
down_revision = '0020'
branch_labels = None
depends_on = None

# Until now last_message_at moved on replies too: the newest inbound message is when the customer wrote.
BACKFILL = ("UPDATE conversations SET customer_wrote_at = (SELECT MAX(messages.created_at) FROM messages "
            "WHERE messages.conversation_id = conversations.id AND messages.direction = 'in')")


def upgrade():
    op.add_column('conversations', sa.Column('customer_wrote_at', sa.DateTime(), nullable=True))
    op.execute(BACKFILL)
    op.create_index('ix_conversations_channel_chat', 'conversations', ['channel_id', 'chat_id'], unique=False)
    op.create_table('send_pacing',
    sa.Column('key', sa.String(length=255), nullable=False),
    sa.Column('next_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )


def downgrade():
    op.drop_table('send_pacing')
    op.drop_index('ix_conversations_channel_chat', table_name='conversations')
    with op.batch_alter_table('conversations') as batch_op:
        batch_op.drop_column('customer_wrote_at')
