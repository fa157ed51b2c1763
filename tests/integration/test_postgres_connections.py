"""PostgreSQL connections and locks: the server keeps its pooled connections under concurrent
load, a worker process listens for NOTIFY on one connection that wakes both its pools, and
``process.cancel`` and a worker failing an instance take their row locks in the order an
advance's save does (the instance's jobs, then the instance).

Every new PostgreSQL connection is a backend process started, its catalog caches filled and its
statements planned again: about 17 ms of the database's CPU, measured. SQLAlchemy's default pool
keeps five and closes each one past the fifth after its request, so with the server's eight HTTP
threads busy a run of 3,000 webhook starts opened ~130 connections, and this test's 400 starts
31-34. PostgreSQL counts every session it started (``pg_stat_database.sessions``): once the pool
holds what the load needs, a second burst of the same load opens none.

PostgreSQL delivers each NOTIFY to every listening session: one per worker process, not one per
pool. With ``BATON_POLL_S`` at a minute, only the notifications can make an instance whose steps
run on the engine pool and the call pool (an HTTP task) finish within seconds.
"""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
import sqlalchemy as sa

from app import create_app
from engine import instances, jobs
from engine.runtime.runner import Runner
from engine.store.db import db
from engine.store.models import Instance, Job
from tests.conftest import make_database_url
from tests.harness import BatonServer, BatonWorker, RpcError, bpmn, drop_postgres_database
from tests.integration.test_bpmn_runtime import deploy, start
from tests.receiver import Answer
from tests.unit.conftest import deploy_for_new_tenant

CLIENTS = 16  # twice the server's HTTP threads: all of them busy at once


@pytest.fixture
def pg_url(tmp_path_factory):
    url = make_database_url("postgresql", tmp_path_factory)
    yield url
    drop_postgres_database(url)


@pytest.fixture
def statistics(pg_url):
    """A query on the server's statistics views about ``pg_url``'s database, from a connection to
    ``postgres`` (not counted there), each in a transaction of its own: a transaction reads the
    statistics once."""
    admin = sa.create_engine(pg_url.rsplit("/", 1)[0] + "/postgres", poolclass=sa.pool.NullPool)
    database = sa.engine.make_url(pg_url).database

    def scalar(sql: str) -> int:
        with admin.connect() as connection:
            return connection.execute(sa.text(sql), {"name": database}).scalar_one()
    yield scalar
    admin.dispose()


def sessions_started(statistics) -> int:
    time.sleep(1.5)  # a live backend reports its counts at most once a second
    return statistics("SELECT sessions FROM pg_stat_database WHERE datname = :name")


def client(url: str, count: int) -> list[int]:
    with requests.Session() as session:  # keep-alive, as a webhook sender under load
        return [session.post(url, json={"amount": 5}, timeout=30).status_code for _ in range(count)]


def burst(url: str, count: int) -> None:
    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = [status for statuses in pool.map(client, [url] * CLIENTS, [count // CLIENTS] * CLIENTS)
                    for status in statuses]
    assert statuses == [202] * (count // CLIENTS * CLIENTS)


def test_concurrent_requests_open_no_new_connections(pg_url, statistics, tmp_path):
    # The web process of the scale-out topology, its pool at the default: eight HTTP threads.
    server = BatonServer(pg_url, tmp_path, BATON_WORKERS="0", BATON_DB_POOL_SIZE="").start()
    try:
        api = server.api(server.create_tenant(f"pool-{uuid.uuid4().hex[:6]}"))
        [route] = api.deploy(bpmn("webhook_order.bpmn"), code="pool")["webhooks"]
        burst(route["url"], 200)  # the pools grow to what this load needs
        before = sessions_started(statistics)
        burst(route["url"], 400)
        opened = sessions_started(statistics) - before
        assert opened <= 1, f"{opened} new connections during 400 requests from {CLIENTS} clients"
    finally:
        server.stop()


def listening_sessions(statistics) -> int:
    return statistics("SELECT count(*) FROM pg_stat_activity WHERE datname = :name AND query = 'LISTEN baton_jobs'")


def test_a_worker_process_listens_once_and_notifications_wake_both_pools(pg_url, statistics, tmp_path, receiver):
    server = BatonServer(pg_url, tmp_path, BATON_WORKERS="0").start()
    worker = BatonWorker(pg_url, tmp_path, threads=1, BATON_POLL_S="60", BATON_CALL_THREADS="2").start()
    try:
        api = server.api(server.create_tenant(f"listen-{uuid.uuid4().hex[:6]}"))
        deploy(api, "cov_http_task", "listen", texts={"https://crm.example.com": "{{ crm_url }}"})
        deadline = time.monotonic() + 10
        while listening_sessions(statistics) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert listening_sessions(statistics) == 1  # the web-only server listens on none
        receiver.default = Answer(201, {"id": 41, "state": "open"})
        for attempt in range(3):
            began = time.monotonic()
            instance_id = start(api, "listen", crm_url=receiver.url, customer_id=attempt, subject="s", crm_token="t")
            done = api.wait_for(instance_id, timeout=20)
            assert done["status"] == "completed" and done["variables"]["ticket_id"] == 41, done
            assert time.monotonic() - began < 5, "woken by the poll, not by NOTIFY"
        assert len(receiver.requests) == 3
    finally:
        worker.stop()
        server.stop()


def test_cancel_beside_a_save_in_flight_neither_deadlocks_nor_fails(pg_url, tmp_path):
    """A save locks its job, then updates the instance; a cancel that locked the instance first and
    then waited for the job deadlocked with it (PostgreSQL aborted one: the cancel answered an
    internal error). Here the save holds its job's lock while the cancel starts, then completes
    the instance: the cancel waits, sees the instance ended, and answers as for an ended one."""
    server = BatonServer(pg_url, tmp_path, BATON_WORKERS="0").start()  # no worker: the start job stays queued
    try:
        api = server.api(server.create_tenant(f"locks-{uuid.uuid4().hex[:6]}"))
        api.deploy(bpmn("wait_for_person.bpmn"), code="locks")
        instance_id = api.call("process.start", definition_id="locks")["instance_id"]
        answers: list = []

        def cancel() -> None:
            try:
                answers.append(api.call("process.cancel", instance_id=instance_id))
            except RpcError as error:
                answers.append((error.code, error.reason))

        with psycopg.connect(pg_url.replace("+psycopg", "")) as save:  # one transaction, as a save's statement
            [(job_id,)] = save.execute("SELECT id FROM jobs WHERE instance_id = %s FOR UPDATE", (instance_id,)).fetchall()
            canceller = threading.Thread(target=cancel)
            canceller.start()
            time.sleep(1.0)  # the cancel is waiting for a lock the save holds
            save.execute("UPDATE instances SET status = 'completed', completed_at = now(), revision = revision + 1 "
                         "WHERE id = %s", (instance_id,))
            save.execute("DELETE FROM jobs WHERE id = %s", (job_id,))
        canceller.join(30)
        assert answers == [(-32602, "conflict")]
        assert api.call("process.status", instance_id=instance_id)["status"] == "completed"
    finally:
        server.stop()


def test_a_worker_failing_an_instance_beside_a_cancel_neither_deadlocks(pg_url):
    """A worker that gives up on a job (``Runner.give_up``) updated the instance, then its job; a
    cancel locks the instance's jobs, then updates the instance: the two deadlocked. Here the
    cancel's transaction (its statements, in its order) holds the job while the worker gives up:
    the worker waits for the job before it touches the instance, finds it gone with the cancelled
    instance, and leaves the instance cancelled."""
    app = create_app({"database_url": pg_url, "workers": 0})
    units = app.extensions["baton.units"]
    try:
        with app.app_context():
            uow = units.new("test")
            tenant_id, deployed = deploy_for_new_tenant(uow, "wait_for_person.bpmn")
            definition = instances.resolve_definition(uow, tenant_id, deployed["definition_id"])
            instance_id = instances.start(uow, tenant_id, definition, {})["instance_id"]
            [job] = jobs.claim(uow, "failing-worker", 30)
            uow.commit()
            db.session.remove()
        errors: list[BaseException] = []

        def give_up() -> None:
            with app.app_context():
                try:
                    with units.begin("test") as uow:
                        Runner(None, None, ()).give_up(job, "failing-worker", uow)
                except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                    errors.append(error)
                finally:
                    db.session.remove()

        with psycopg.connect(pg_url.replace("+psycopg", "")) as cancel:  # one transaction, as process.cancel's
            cancel.execute("SELECT id FROM jobs WHERE instance_id = %s ORDER BY id FOR UPDATE", (instance_id,))
            worker = threading.Thread(target=give_up)
            worker.start()
            time.sleep(1.0)  # the worker is giving up meanwhile
            cancel.execute("UPDATE instances SET status = 'cancelled', completed_at = now(), revision = revision + 1 "
                           "WHERE id = %s AND status = 'running'", (instance_id,))
            cancel.execute("DELETE FROM jobs WHERE instance_id = %s", (instance_id,))
        worker.join(30)
        assert not worker.is_alive() and errors == []
        with app.app_context():
            assert db.session.get(Instance, instance_id).status == "cancelled"
            assert db.session.execute(sa.select(Job).where(Job.instance_id == instance_id)).first() is None
            db.session.remove()
    finally:
        with app.app_context():
            db.engine.dispose()
