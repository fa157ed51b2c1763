"""secrets at rest (issue 29): the ids of the keys stored secrets are sealed with; the secret
columns widened to text (a sealed value is longer); every secret stored so far sealed under the
key the app factory installed (engine.store.sealing)

Revision ID: 0025
Revises: 0020
Create Date: 2026-11-28 23:45:00.000000

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = '0025'
down_revision = '0024'
branch_labels = None
depends_on = None


def upgrade():
    from engine.store import sealing

    op.create_table('secret_keys',
    sa.Column('key_id', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('key_id')
    )
    for table, column in (('channels', 'webhook_secret'), ('webhook_routes', 'secret')):
        if op.get_bind().dialect.name == "postgresql":
            op.alter_column(table, column, type_=sa.Text(), existing_type=sa.String(length=255))
        else:  # SQLite changes no column's type: a new one takes the values and the name (no table copy)
            op.execute(f"ALTER TABLE {table} ADD COLUMN {column}_sealed TEXT")
            op.execute(f"UPDATE {table} SET {column}_sealed = {column}")
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
            op.execute(f"ALTER TABLE {table} RENAME COLUMN {column}_sealed TO {column}")
    sealing.reseal_all(op.get_bind(), sealing.ring())


def downgrade():
    raise NotImplementedError("Sealed secrets are not turned back into plaintext.")
