"""ai dialogs, their knowledge texts, and the answer's place in a conversation

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 07:50:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')


def upgrade():
    op.create_table('ai_knowledge',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'sha256')
    )
    op.create_table('ai_dialogs',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('conversation_id', BIG, nullable=False),
    sa.Column('spiff_task_id', sa.String(length=36), nullable=False),
    sa.Column('element_id', sa.String(length=255), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('system_prompt', sa.Text(), nullable=False),
    sa.Column('knowledge_id', BIG, nullable=True),
    sa.Column('model', sa.String(length=200), nullable=True),
    sa.Column('max_turns', sa.Integer(), nullable=False),
    sa.Column('handoff_keywords', sa.JSON(), nullable=False),
    sa.Column('turns', sa.Integer(), nullable=False),
    sa.Column('answered_through', BIG, nullable=False),
    sa.Column('last_answer', sa.Text(), nullable=True),
    sa.Column('busy_job_id', BIG, nullable=True),
    sa.Column('busy_until', sa.DateTime(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('ended_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ),
    sa.ForeignKeyConstraint(['conversation_id'], ['conversations.id'], ),
    sa.ForeignKeyConstraint(['knowledge_id'], ['ai_knowledge.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('instance_id', 'spiff_task_id')
    )
    with op.batch_alter_table('ai_dialogs', schema=None) as batch_op:
        batch_op.create_index('ix_ai_dialogs_conversation_status', ['conversation_id', 'status'], unique=False)
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reply_to_id', BIG, nullable=True))


def downgrade():
    with op.batch_alter_table('messages', schema=None) as batch_op:
        batch_op.drop_column('reply_to_id')
    with op.batch_alter_table('ai_dialogs', schema=None) as batch_op:
        batch_op.drop_index('ix_ai_dialogs_conversation_status')
    op.drop_table('ai_dialogs')
    op.drop_table('ai_knowledge')
