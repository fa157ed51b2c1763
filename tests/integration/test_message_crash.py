"""Messages between instances survive ``kill -9``: a thrown message's delivery is a job committed
with the thrower's state, and delivering it is one transaction with the jobs it queues.

Each backend gets its own database and its own server (the embedded default; this test kills
what it runs). The two-pool collaboration of test_messages.py (a shop sends an order, the store's
message start event starts a store instance that replies; the reply finds its shop by the order's
correlation key) runs 80 conversations at once; while they are under way the server gets SIGKILL,
then starts again on the same database. Then every shop completes with its own parcel, exactly
one store instance exists per order (a delivery never runs twice), nothing failed and no job is
left."""
from __future__ import annotations

import collections
import json
import time

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import BACKENDS
from tests.harness import BatonServer
from tests.integration.test_messages import COLLABORATION, definitions

ORDERS = 80
SETTLE_TIMEOUT_S = 90.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_kill_in_the_middle_of_a_conversation_loses_no_message(backend, own_database, tmp_path):
    server = BatonServer(own_database, tmp_path, BATON_JOB_LEASE_S="2").start()
    try:
        api = server.api(server.create_tenant("crash"))
        deployed = api.deploy(definitions(COLLABORATION, "c"))
        shop, store = (d["definition_id"] for d in deployed["definitions"])
        shops = {api.call("process.start", definition_id=shop, variables={"order_id": n})["instance_id"]: n
                 for n in range(ORDERS)}
        deadline = time.monotonic() + 30
        while api.call("process.list", definition_id=store)["total"] < 5:  # under way
            assert time.monotonic() < deadline, "no store instance started"
            time.sleep(0.01)
        server.kill()
        engine = create_engine(own_database)
        with engine.connect() as connection:  # the kill did interrupt conversations
            assert connection.execute(text("SELECT count(*) FROM instances WHERE status = 'running'")).scalar_one()
        engine.dispose()
        server.start()
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while api.call("process.list", status="running")["total"]:
            assert time.monotonic() < deadline, api.call("process.list", status="running")
            time.sleep(0.2)
        for instance_id, order_id in shops.items():
            done = api.call("process.status", instance_id=instance_id)
            assert done["status"] == "completed", done
            assert done["variables"] == {"order_id": order_id, "parcel": f"parcel-{order_id}"}
        engine = create_engine(own_database)
        with engine.connect() as connection:
            orders = connection.execute(text(
                "SELECT variables FROM instances WHERE definition_id = :store"), {"store": store}).scalars().all()
            left = connection.execute(text("SELECT count(*) FROM jobs WHERE kind <> 'retention'")).scalar_one()
            failed = connection.execute(text("SELECT count(*) FROM instances WHERE status <> 'completed'")).scalar_one()
        engine.dispose()
        per_order = collections.Counter((v if isinstance(v, dict) else json.loads(v))["order_id"] for v in orders)
        assert per_order == collections.Counter(range(ORDERS))  # each order started exactly one store instance
        assert left == 0 and failed == 0
    finally:
        server.stop()
