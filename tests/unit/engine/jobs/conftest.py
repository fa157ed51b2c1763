"""What the worker tests share: units of work that hand over to (and wake) the test's own pools
only, and pools started for the test module's ``KIND`` on a job table emptied before and after."""
from __future__ import annotations

import pytest
from sqlalchemy import delete, select

from engine.jobs.wakers import Wakers
from engine.jobs.worker import WorkerPool
from engine.store.db import db
from engine.store.models import Job, Tenant
from engine.store.unit_of_work import Units


@pytest.fixture
def units(app):
    """Units of work that hand over to (and wake) the test's pools only."""
    return Units(Wakers())


@pytest.fixture
def uow(units, app):
    with app.app_context():
        unit = units.new("test")
    yield unit
    unit.rollback()


@pytest.fixture
def pool_for(app, units, request):
    """``pool_for(handler, **options)`` starts a one-thread pool running the module's ``KIND``
    with ``handler``; every pool started is stopped (one second's grace) when the test ends."""
    kind = request.module.KIND
    pools: list[WorkerPool] = []

    def start(handler, **options) -> WorkerPool:
        options = {"threads": 1, "lease_seconds": 30, "poll_seconds": 30, **options}
        pool = WorkerPool(app, {kind: handler}, units=units, wakers=units.wakers, **options)
        pool.start()
        pools.append(pool)
        return pool

    with app.app_context():
        with units.begin("test") as uow:
            uow.execute(delete(Job))
            if uow.execute(select(Tenant.id).limit(1)).scalar() is None:
                uow.session.add(Tenant(name="worker-tests"))
        yield start
        for pool in pools:
            pool.stop(grace_s=1)
        with units.begin("test") as uow:
            uow.execute(delete(Job))
        db.session.remove()
