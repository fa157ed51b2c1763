"""operator work (issue 27): operators on API keys, task assignment and due dates, who a task is for,
Camunda Forms, conversations held by an operator or handed to a group

Revision ID: 0020
Revises: 0016
Create Date: 2026-11-28 21:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0020'
down_revision = '0016'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')

# task_audience.status follows tasks.status, whichever code changes it (engine.store.operator_models).
PG_FUNCTION = """
CREATE FUNCTION baton_task_audience_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE task_audience SET status = NEW.status WHERE task_id = NEW.id;
  RETURN NULL;
END $$;
"""
PG_TRIGGER = ("CREATE TRIGGER tasks_audience_status AFTER UPDATE OF status ON tasks FOR EACH ROW "
              "WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION baton_task_audience_status()")
SQLITE_TRIGGER = ("CREATE TRIGGER tasks_audience_status AFTER UPDATE OF status ON tasks "
                  "WHEN OLD.status IS NOT NEW.status BEGIN "
                  "UPDATE task_audience SET status = NEW.status WHERE task_id = NEW.id; END")


def upgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table('forms',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('form_key', sa.String(length=255), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('schema', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'form_key', 'version')
    )
    op.add_column('api_keys', sa.Column('user', sa.String(length=200), nullable=True))
    op.add_column('api_keys', sa.Column('groups', sa.JSON(), nullable=True))
    op.add_column('definitions', sa.Column('forms', sa.JSON(), nullable=True))
    op.add_column('conversations', sa.Column('assignee', sa.String(length=200), nullable=True))
    op.add_column('conversations', sa.Column('candidate_group', sa.String(length=200), nullable=True))
    op.add_column('ai_dialogs', sa.Column('handoff_groups', sa.JSON(), nullable=True))
    # Columns added in place (no batch copy of the table on SQLite: that would drop the task count
    # triggers of 0016).
    for column in (sa.Column('assignee', sa.String(length=200), nullable=True),
                   sa.Column('candidate_users', sa.JSON(), nullable=True),
                   sa.Column('candidate_groups', sa.JSON(), nullable=True),
                   sa.Column('due_at', sa.DateTime(), nullable=True),
                   sa.Column('due_order', sa.DateTime(), nullable=False,
                             server_default=sa.text("'9999-12-31 00:00:00'")),
                   sa.Column('follow_up_at', sa.DateTime(), nullable=True),
                   sa.Column('priority', sa.Integer(), nullable=False, server_default=sa.text('50'))):
        op.add_column('tasks', column)
    if postgres:
        op.add_column('tasks', sa.Column('form_id', sa.BigInteger(), nullable=True))
        op.create_foreign_key('fk_tasks_form_id_forms', 'tasks', 'forms', ['form_id'], ['id'])
    else:
        op.execute("ALTER TABLE tasks ADD COLUMN form_id INTEGER REFERENCES forms (id)")
    op.create_index('ix_tasks_tenant_assignee_status_id', 'tasks', ['tenant_id', 'assignee', 'status', 'id'])
    op.create_index('ix_tasks_tenant_status_due_id', 'tasks', ['tenant_id', 'status', 'due_order', 'id'])
    op.create_index('ix_tasks_tenant_status_priority_id', 'tasks', ['tenant_id', 'status', 'priority', 'id'])
    op.create_table('task_audience',
    sa.Column('task_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('who', sa.String(length=210), nullable=False),
    sa.Column('tenant_id', sa.BigInteger(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.ForeignKeyConstraint(['task_id'], ['tasks.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('task_id', 'who')
    )
    op.create_index('ix_task_audience_who', 'task_audience', ['tenant_id', 'who', 'status', 'task_id'])
    if postgres:
        op.execute(PG_FUNCTION)
        op.execute(PG_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def downgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("DROP TRIGGER IF EXISTS tasks_audience_status" + (" ON tasks" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS baton_task_audience_status()")
    op.drop_index('ix_task_audience_who', table_name='task_audience')
    op.drop_table('task_audience')
    for index in ('ix_tasks_tenant_status_priority_id', 'ix_tasks_tenant_status_due_id',
                  'ix_tasks_tenant_assignee_status_id'):
        op.drop_index(index, table_name='tasks')
    if postgres:
        op.drop_constraint('fk_tasks_form_id_forms', 'tasks', type_='foreignkey')
    # In place, as added (SQLite 3.35 drops a column; form_id stays there: SQLite cannot drop a
    # column that references another table, and an unused NULL column harms nothing).
    for column in (('form_id',) if postgres else ()) + ('priority', 'follow_up_at', 'due_order', 'due_at',
                                                        'candidate_groups', 'candidate_users', 'assignee'):
        op.drop_column('tasks', column)
    op.drop_column('ai_dialogs', 'handoff_groups')
    op.drop_column('conversations', 'candidate_group')
    op.drop_column('conversations', 'assignee')
    op.drop_column('definitions', 'forms')
    op.drop_column('api_keys', 'groups')
    op.drop_column('api_keys', 'user')
    if postgres:
        op.drop_table('forms')
