"""Fixtures of the chat tests that play the worker."""
from __future__ import annotations

import pytest
from sqlalchemy import delete

from engine.store.db import db
from engine.store.models import Job


@pytest.fixture
def ctx(app):
    """An app context whose job table is empty before and after: the test claims whatever is due."""
    with app.app_context():
        db.session.execute(delete(Job))
        db.session.commit()
        yield app
        db.session.rollback()
        db.session.execute(delete(Job))
        db.session.commit()
        db.session.remove()
