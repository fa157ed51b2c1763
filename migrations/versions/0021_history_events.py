"""instance history (issue 26): the append-only timeline of what happened to each instance and who did it

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-28 23:30:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0021'
down_revision = '0020'
branch_labels = None
depends_on = None

BIG = sa.BigInteger().with_variant(sa.Integer(), 'sqlite')

# The start and the end of an instance are written into its history by the database, in the
# statement that creates it and in the one that completes it (engine.store.history): no statement
# more on the hot path. The actor of the start is the instance's started_by.
SYSTEM = '{"type": "system", "name": "baton"}'
PG_FUNCTION = f"""
CREATE FUNCTION baton_instance_history() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO history_events (tenant_id, instance_id, at, kind, actor, detail)
    VALUES (NEW.tenant_id, NEW.id, COALESCE(NEW.started_at, timezone('utc', now())), 'started',
            COALESCE(NEW.started_by, '{SYSTEM}'::json), '{{}}'::json);
  ELSE
    INSERT INTO history_events (tenant_id, instance_id, at, kind, actor, detail)
    VALUES (NEW.tenant_id, NEW.id, COALESCE(NEW.completed_at, timezone('utc', now())), 'completed',
            '{SYSTEM}'::json, '{{}}'::json);
  END IF;
  RETURN NULL;
END $$;
"""
PG_TRIGGERS = (
    "CREATE TRIGGER instances_history_started AFTER INSERT ON instances FOR EACH ROW "
    "EXECUTE FUNCTION baton_instance_history()",
    "CREATE TRIGGER instances_history_completed AFTER UPDATE OF status ON instances FOR EACH ROW "
    "WHEN (NEW.status = 'completed' AND OLD.status IS DISTINCT FROM 'completed') "
    "EXECUTE FUNCTION baton_instance_history()")
SQLITE_TRIGGERS = (
    "CREATE TRIGGER instances_history_started AFTER INSERT ON instances BEGIN "
    "INSERT INTO history_events (tenant_id, instance_id, at, kind, actor, detail) VALUES (NEW.tenant_id, NEW.id, "
    f"COALESCE(NEW.started_at, CURRENT_TIMESTAMP), 'started', COALESCE(NEW.started_by, '{SYSTEM}'), '{{}}'); END",
    "CREATE TRIGGER instances_history_completed AFTER UPDATE OF status ON instances "
    "WHEN NEW.status = 'completed' AND OLD.status IS NOT 'completed' BEGIN "
    "INSERT INTO history_events (tenant_id, instance_id, at, kind, actor, detail) VALUES (NEW.tenant_id, NEW.id, "
    f"COALESCE(NEW.completed_at, CURRENT_TIMESTAMP), 'completed', '{SYSTEM}', '{{}}'); END")


def upgrade():
    op.create_table('history_events',
    sa.Column('id', BIG, nullable=False),
    sa.Column('tenant_id', BIG, nullable=False),
    sa.Column('instance_id', BIG, nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('element_id', sa.String(length=255), nullable=True),
    sa.Column('actor', sa.JSON(), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.ForeignKeyConstraint(['instance_id'], ['instances.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_history_events_instance_id', 'history_events', ['instance_id', 'id'], unique=False)
    # In place: no batch copy of the table on SQLite.
    op.add_column('instances', sa.Column('started_by', sa.JSON(), nullable=True))
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        op.execute(PG_FUNCTION)
    for trigger in PG_TRIGGERS if postgres else SQLITE_TRIGGERS:
        op.execute(trigger)


def downgrade():
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in ('instances_history_started', 'instances_history_completed'):
        op.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON instances" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS baton_instance_history()")
    op.drop_column('instances', 'started_by')
    op.drop_index('ix_history_events_instance_id', table_name='history_events')
    op.drop_table('history_events')
