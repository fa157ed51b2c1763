"""The migrations build exactly the schema the models describe, on both databases (Alembic's
``compare_metadata`` after ``create_app`` has run every migration)."""
from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from engine.store.db import db


def test_the_migrated_schema_matches_the_models(app):
    with app.app_context():
        with db.engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True,
                                                                   "compare_server_default": False})
            differences = compare_metadata(context, db.metadata)
    assert differences == []


def test_a_model_the_migrations_lack_is_found(app):
    """The comparison is not blind: a column the models have and no migration made shows up."""
    from sqlalchemy import Column, Integer, MetaData

    metadata = MetaData()
    for table in db.metadata.sorted_tables:
        table.to_metadata(metadata)
    metadata.tables["instances"].append_column(Column("not_migrated", Integer))
    with app.app_context():
        with db.engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert [d[0] for d in differences] == ["add_column"]
