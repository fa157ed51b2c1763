"""task counts (issue 15): task.list's total without a count(*), kept by triggers on tasks

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24 10:00:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0016'
down_revision = '0015'
branch_labels = None
depends_on = None

KEY = "tenant_id, definition_id, status"

# PostgreSQL: one trigger per statement with its transition tables; the changes of a statement are
# summed per key and applied in key order (one lock order for every statement: no deadlock
# between two of them). A counter that reaches 0 stays (a handful of rows per tenant).
PG_FUNCTION = f"""
CREATE FUNCTION baton_count_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO task_counts ({KEY}, tasks)
      SELECT {KEY}, count(*) FROM new_rows GROUP BY {KEY} ORDER BY {KEY}
      ON CONFLICT ({KEY}) DO UPDATE SET tasks = task_counts.tasks + EXCLUDED.tasks;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO task_counts ({KEY}, tasks)
      SELECT {KEY}, -count(*) FROM old_rows GROUP BY {KEY} ORDER BY {KEY}
      ON CONFLICT ({KEY}) DO UPDATE SET tasks = task_counts.tasks + EXCLUDED.tasks;
  ELSE
    INSERT INTO task_counts ({KEY}, tasks)
      SELECT {KEY}, sum(change) FROM (
        SELECT {KEY}, 1 AS change FROM new_rows
        UNION ALL SELECT {KEY}, -1 FROM old_rows) AS changes
      GROUP BY {KEY} HAVING sum(change) <> 0 ORDER BY {KEY}
      ON CONFLICT ({KEY}) DO UPDATE SET tasks = task_counts.tasks + EXCLUDED.tasks;
  END IF;
  RETURN NULL;
END $$;
"""
PG_TRIGGERS = [
    "CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION baton_count_tasks()",
    "CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION baton_count_tasks()",
    "CREATE TRIGGER tasks_counted_update AFTER UPDATE ON tasks REFERENCING OLD TABLE AS old_rows "
    "NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION baton_count_tasks()",
]

# SQLite: row triggers (one writer at a time: no lock order to care about).
_ADD = (f"INSERT INTO task_counts ({KEY}, tasks) VALUES (NEW.tenant_id, NEW.definition_id, NEW.status, 1) "
        f"ON CONFLICT ({KEY}) DO UPDATE SET tasks = tasks + 1;")
_REMOVE = ("UPDATE task_counts SET tasks = tasks - 1 WHERE tenant_id = OLD.tenant_id "
           "AND definition_id = OLD.definition_id AND status = OLD.status;")
SQLITE_TRIGGERS = [
    f"CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks BEGIN {_ADD} END",
    f"CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks BEGIN {_REMOVE} END",
    "CREATE TRIGGER tasks_counted_update AFTER UPDATE OF tenant_id, definition_id, status ON tasks "
    "WHEN OLD.tenant_id IS NOT NEW.tenant_id OR OLD.definition_id IS NOT NEW.definition_id "
    f"OR OLD.status IS NOT NEW.status BEGIN {_REMOVE} {_ADD} END",
]
TRIGGERS = ("tasks_counted_insert", "tasks_counted_delete", "tasks_counted_update")


def upgrade():
    op.create_table('task_counts',
    sa.Column('tenant_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('definition_id', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('tasks', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id', 'definition_id', 'status')
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute("LOCK TABLE tasks IN SHARE ROW EXCLUSIVE MODE")  # no task changes between count and triggers
        op.execute(PG_FUNCTION)
    for statement in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(statement)
    op.execute(f"INSERT INTO task_counts ({KEY}, tasks) SELECT {KEY}, count(*) FROM tasks GROUP BY {KEY}")


def downgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON tasks" if postgres else f"DROP TRIGGER {name}")
    if postgres:
        op.execute("DROP FUNCTION baton_count_tasks()")
    op.drop_table('task_counts')
