"""task.list latency on 100,000 tasks, as a ratio to the same call on 1,000 tasks (target: <= 1.5, issue 15).

For each backend, real servers (`flask --app app serve`, tests.harness.BatonServer) on fresh
databases, each with two tenants that have two deployed definitions each
(tests/bpmn/approval_form.bpmn). One real instance is started in each database so that the form /
buttons JSON of the filler's rows is the engine's own. Tasks are then written directly with bulk
INSERTs (SQLAlchemy core on the database URL): instances of 5 tasks each, half per definition,
70 % completed / 30 % in_progress, realistic variables and results, both tenants' rows interleaved
in id order. The other tenant always holds as many tasks as the measured one, so the tenant filter
is never free.

Default ("paired"): two databases, each with its own server. One is filled to --small tasks per
tenant (1,000); the other to --small and then to --large (100,000) with the same seed, so its first
1,000 tasks are the same rows. Both are timed in the same minutes, call by call, so that the load of
a shared machine hits both sizes alike. With --sequential: one database, filled to --small and
timed, then filled to --large and timed again.

Every call goes over HTTP as JSON-RPC `task.list` (per_page 20), round-robin, --repeats times each
after a warm-up; every answer is first checked against an independent query (same total, same ids
in the same order). The ratio is median(large) / median(small) per call:

  first        page 1, no filter                       (target)
  last         page ceil(total / 20), no filter        (target)
  status       status=in_progress, page 1             (target)
  instance     instance_id=X, page 1 (X: 5 tasks, >= 1 open)  (target)
  definition   definition_id=Y, page 1                (target)
  all_three    status=in_progress + instance_id=X + definition_id=Y   (target)
  middle       page ceil(total / 20) // 2, no filter  (reported only: OFFSET paging is linear there)
  combined     status=in_progress + definition_id=Y   (reported only: no index holds both columns)

and the operator inbox (issue 27; every filler task has a candidate group of five, 40 % an assignee
of ten users, 20 % a candidate user, 60 % a due date 1 to 90 days after it opened, a priority):

  mine         mine=true for user3 in group2: assigned to them, or unheld and theirs (target)
  group        candidate_group=group1: unheld open tasks of the group   (target)
  assignee     assignee=user5, status=in_progress       (target)
  unassigned   assignee=null, status=in_progress        (target)
  by_due       status=in_progress, sort=due             (target)
  by_priority  status=in_progress, sort=priority        (target)
  overdue      overdue=true (created order)             (reported only: the overdue set grows with the table)
  mine_by_due  mine=true, sort=due                      (reported only: the user's set is sorted by due)

The SQL that `engine.tasks.list_tasks` sends for each call is captured in this process (a Flask app
on the same database), timed in the database, and explained (EXPLAIN (ANALYZE) on PostgreSQL,
EXPLAIN QUERY PLAN on SQLite); the number of statements per call is recorded (no query per item).
PostgreSQL gets VACUUM ANALYZE after each fill (what autovacuum does shortly after such a load);
SQLite gets a WAL checkpoint and no ANALYZE (Baton never runs one). Results go to
bench/results/task-list-latest.json; the exit code is 1 when a targeted ratio is above 1.5.

    python bench/task_list.py                          # both backends, 1,000 vs 100,000 tasks
    python bench/task_list.py --backends sqlite --repeats 50
    python bench/task_list.py --sequential             # one database, filled in two steps
    python bench/task_list.py --quick                  # a smoke run: 1,000 vs 10,000 tasks
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import case, create_engine, event, func, insert, select, text  # noqa: E402

from bench.common import percentile, run_header  # noqa: E402
from tests.harness import (Api, BatonServer, bpmn, create_postgres_database,  # noqa: E402
                           drop_postgres_database)

BPMN_FILE = "approval_form.bpmn"
RESULTS = ROOT / "bench" / "results" / "task-list-latest.json"
TARGET_RATIO = 1.5  # issue 15
PER_PAGE = 20
TASKS_PER_INSTANCE = 5
COMPLETED_SHARE = 0.70
BATCH = 2000
TARGETED = ("first", "last", "status", "instance", "definition", "all_three", "mine", "group", "assignee",
            "unassigned", "by_due", "by_priority")
CALL_ORDER = ("first", "last", "status", "instance", "definition", "all_three", "middle", "combined", "mine",
              "group", "assignee", "unassigned", "by_due", "by_priority", "overdue", "mine_by_due")
USERS = [f"user{i}" for i in range(10)]
GROUPS = [f"group{i}" for i in range(5)]
OPERATOR = {"user": "user3", "groups": ["group2"]}  # whose "mine" is measured

CUSTOMERS = ["Zoë Martin", "Ana Souza", "Kenji Watanabe", "Olu Adeyemi", "Marta Nowak", "Liam O'Brien",
             "Priya Raman", "Jonas Berg", "Chloé Dubois", "Mateo García"]
SKUS = ["KB-101", "MS-220", "HD-4TB", "LCD-27", "USB-C7", "CAM-HD", "SPK-02", "CHR-9"]
REASONS = ["damaged", "late"]


# =============================================================================================
# Filling the database

class Filler:
    """Bulk INSERTs of instances and tasks, straight into the server's database."""

    def __init__(self, database_url: str, template: dict, seed: int = 7):
        from engine.store.models import Instance, Task, TaskAudience

        self.instances = Instance.__table__
        self.tasks = Task.__table__
        self.audience = TaskAudience.__table__
        self.engine = create_engine(database_url)
        if self.engine.dialect.name == "sqlite":
            from engine.store.driver import configure_sqlite

            configure_sqlite(self.engine)   # WAL, busy timeout, BEGIN IMMEDIATE, like the server
        self.template = template
        self.rng = random.Random(seed)
        # Task timestamps: one new task every ~20 s, starting 60 days ago, strictly increasing.
        self.clock = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(days=60)
        self.order = 0

    def count(self, tenant_id: int) -> int:
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(self.tasks)
                                .where(self.tasks.c.tenant_id == tenant_id)).scalar_one()

    def _variables(self) -> dict:
        self.order += 1
        lines = [{"sku": self.rng.choice(SKUS), "qty": self.rng.randint(1, 4),
                  "price": round(self.rng.uniform(5, 400), 2)} for _ in range(self.rng.randint(1, 4))]
        return {"customer": self.rng.choice(CUSTOMERS), "order": 100000 + self.order,
                "email": f"customer{self.order}@example.com",
                "channel": self.rng.choice(["web", "phone", "shop"]),
                "lines": lines, "total": round(sum(l["qty"] * l["price"] for l in lines), 2),
                "note": "Parcel arrived with a dented corner; customer asks for a partial refund."}

    def _plan(self, tenant_id: int, definition_ids: list[int],
              count: int) -> tuple[list[dict], list[list[dict]]]:
        """Instance rows and, per instance, its task rows (without ids, times and instance ids)."""
        instance_rows, task_groups = [], []
        index = 0
        while count > 0:
            size = min(TASKS_PER_INSTANCE, count)
            count -= size
            definition_id = definition_ids[index % len(definition_ids)]
            index += 1
            variables = self._variables()
            statuses = ["completed" if self.rng.random() < COMPLETED_SHARE else "in_progress"
                        for _ in range(size)]
            instance_rows.append({
                "tenant_id": tenant_id, "definition_id": definition_id,
                "status": "running" if "in_progress" in statuses else "completed",
                "revision": size, "state": None, "variables": variables, "output_keys": None,
                "waiting_for": [], "error": None})
            task_groups.append([{
                "tenant_id": tenant_id, "definition_id": definition_id, "spiff_task_id": str(uuid.uuid4()),
                "element_id": self.template["element_id"], "name": self.template["name"], "status": status,
                "form": self.template["form"], "buttons": self.template["buttons"],
                "variables": {**variables, "step": step + 1}, **self._assignment()}
                for step, status in enumerate(statuses)])
        return instance_rows, task_groups

    def _assignment(self) -> dict:
        """Who the task is for (issue 27); the due date is set with the creation time."""
        return {"assignee": self.rng.choice(USERS) if self.rng.random() < 0.4 else None,
                "candidate_users": [self.rng.choice(USERS)] if self.rng.random() < 0.2 else None,
                "candidate_groups": [self.rng.choice(GROUPS)], "priority": self.rng.choice([20, 50, 50, 80]),
                "due_in_days": self.rng.randint(1, 90) if self.rng.random() < 0.6 else None}

    def fill(self, plan: dict[int, tuple[list[int], int]]) -> dict:
        """``plan``: tenant id -> (definition ids, task count wanted). Both tenants' tasks interleave."""
        started = time.perf_counter()
        tasks: list[dict] = []
        added = {}
        with self.engine.begin() as conn:
            for tenant_id, (definition_ids, wanted) in plan.items():
                have = conn.execute(select(func.count()).select_from(self.tasks)
                                    .where(self.tasks.c.tenant_id == tenant_id)).scalar_one()
                need = max(0, wanted - have)
                added[tenant_id] = need
                instance_rows, groups = self._plan(tenant_id, definition_ids, need)
                ids = []
                for chunk in range(0, len(instance_rows), BATCH):
                    rows = instance_rows[chunk:chunk + BATCH]
                    result = conn.execute(insert(self.instances).returning(self.instances.c.id,
                                                                           sort_by_parameter_order=True), rows)
                    ids.extend(result.scalars().all())
                for instance_id, group in zip(ids, groups):
                    for row in group:
                        row["instance_id"] = instance_id
                    tasks.extend(group)
        # Tasks of many instances (and of both tenants) open over time: shuffle, then stamp times in
        # id order, so created_at grows with id as it does on a real server.
        self.rng.shuffle(tasks)
        from engine.store.models import NO_DUE_DATE

        for row in tasks:
            self.clock += dt.timedelta(seconds=self.rng.randint(5, 35))
            row["created_at"] = self.clock
            days = row.pop("due_in_days")
            row["due_at"] = self.clock + dt.timedelta(days=days) if days else None
            row["due_order"] = row["due_at"] or NO_DUE_DATE
            if row["status"] == "completed":
                row["completed_at"] = self.clock + dt.timedelta(minutes=self.rng.randint(2, 600))
                row["result"] = {"response": "Refund granted, sorry for the trouble.",
                                 "decision": self.rng.choice(["approve", "reject"]),
                                 "amount": self.rng.randint(5, 80), "reason": self.rng.choice(REASONS),
                                 "vip": self.rng.random() < 0.1}
            else:
                row["completed_at"] = None
                row["result"] = None
        for chunk in range(0, len(tasks), BATCH):
            rows = tasks[chunk:chunk + BATCH]
            with self.engine.begin() as conn:
                ids = conn.execute(insert(self.tasks).returning(self.tasks.c.id, sort_by_parameter_order=True),
                                   rows).scalars().all()
                audience = [{"task_id": task_id, "tenant_id": row["tenant_id"], "status": row["status"], "who": who}
                            for task_id, row in zip(ids, rows)
                            for who in ([f"u:{row['assignee']}"] if row["assignee"] else
                                        [f"u:{u}" for u in row["candidate_users"] or []]
                                        + [f"g:{g}" for g in row["candidate_groups"] or []])]
                conn.execute(insert(self.audience), audience)
        self.settle()
        return {"added": added, "seconds": round(time.perf_counter() - started, 1)}

    def settle(self) -> None:
        """PostgreSQL: VACUUM ANALYZE (autovacuum's job, done now). SQLite: checkpoint the WAL."""
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE tasks"))
                conn.execute(text("VACUUM ANALYZE task_audience"))
                conn.execute(text("VACUUM ANALYZE instances"))
        else:
            import sqlite3

            with contextlib.closing(sqlite3.connect(self.engine.url.database, timeout=30)) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def first_instance_with(self, tenant_id: int, definition_id: int, tasks: int) -> int:
        """The lowest instance id of the definition with exactly ``tasks`` tasks, one of them open."""
        c = self.tasks.c
        open_ones = func.sum(case((c.status == "in_progress", 1), else_=0))
        with self.engine.connect() as conn:
            return conn.execute(
                select(c.instance_id).where(c.tenant_id == tenant_id, c.definition_id == definition_id)
                .group_by(c.instance_id).having(func.count() == tasks, open_ones > 0)
                .order_by(c.instance_id).limit(1)).scalar_one()

    def expected_ids(self, tenant_id: int, params: dict) -> tuple[int, list[int]]:
        """(total, ids of the page) computed independently of list_tasks, for the correctness check."""
        if set(params) - {"status", "instance_id", "definition_id", "page", "per_page"}:
            return self._expected_inbox(tenant_id, params)
        c = self.tasks.c
        conditions = [c.tenant_id == tenant_id]
        for name in ("status", "instance_id", "definition_id"):
            if name in params:
                conditions.append(c[name] == params[name])
        page, per_page = params.get("page", 1), params.get("per_page", PER_PAGE)
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(self.tasks).where(*conditions)).scalar_one()
            ids = conn.execute(select(c.id).where(*conditions).order_by(c.id.desc())
                               .limit(per_page).offset((page - 1) * per_page)).scalars().all()
        return total, ids

    def _expected_inbox(self, tenant_id: int, params: dict) -> tuple[int, list[int]]:
        """The inbox filters and sorts of issue 27, computed in Python over every row of the tenant
        (from the tasks' own columns, not task_audience)."""
        c = self.tasks.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(c.id, c.status, c.assignee, c.candidate_users, c.candidate_groups,
                                       c.due_at, c.due_order, c.priority).where(c.tenant_id == tenant_id)).all()
        now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)

        def keep(row) -> bool:
            if "status" in params and row.status != params["status"]:
                return False
            if "assignee" in params and row.assignee != params["assignee"]:
                return False
            if params.get("overdue") and not (row.status == "in_progress" and row.due_at and row.due_at < now):
                return False
            if "candidate_group" in params and not (row.status == "in_progress" and row.assignee is None
                                                    and params["candidate_group"] in (row.candidate_groups or [])):
                return False
            if params.get("mine"):
                theirs = row.assignee == OPERATOR["user"] or (row.assignee is None and (
                    OPERATOR["user"] in (row.candidate_users or [])
                    or set(OPERATOR["groups"]) & set(row.candidate_groups or [])))
                if not (row.status == "in_progress" and theirs):
                    return False
            return True

        chosen = [row for row in rows if keep(row)]
        sort = params.get("sort", "created")
        key = {"created": lambda r: -r.id, "due": lambda r: (r.due_order, r.id),
               "priority": lambda r: (-r.priority, -r.id)}[sort]
        chosen.sort(key=key)
        page, per_page = params.get("page", 1), params.get("per_page", PER_PAGE)
        ids = [row.id for row in chosen[(page - 1) * per_page:page * per_page]]
        return len(chosen), ids

    def close(self) -> None:
        self.engine.dispose()


# =============================================================================================
# Measuring

def define_calls(api: Api, instance_id: int, definition_id: int) -> dict[str, dict]:
    total = api.call("task.list")["total"]
    last = max(1, math.ceil(total / PER_PAGE))
    return {"first": {}, "last": {"page": last}, "middle": {"page": max(1, last // 2)},
            "status": {"status": "in_progress"}, "instance": {"instance_id": instance_id},
            "definition": {"definition_id": definition_id},
            "all_three": {"status": "in_progress", "instance_id": instance_id, "definition_id": definition_id},
            "combined": {"status": "in_progress", "definition_id": definition_id},
            "mine": {"mine": True, "as": "operator"}, "group": {"candidate_group": "group1"},
            "assignee": {"assignee": "user5", "status": "in_progress"},
            "unassigned": {"assignee": None, "status": "in_progress"},
            "by_due": {"status": "in_progress", "sort": "due"},
            "by_priority": {"status": "in_progress", "sort": "priority"},
            "overdue": {"overdue": True}, "mine_by_due": {"mine": True, "sort": "due", "as": "operator"}}


def list_call(api: Api, params: dict) -> dict:
    """task.list with ``params``, as the key ``params['as']`` names (the operator's, or the admin's)."""
    client = api.operator if params.get("as") == "operator" else api
    return client.call("task.list", **{k: v for k, v in params.items() if k != "as"})


def check_answers(api: Api, filler: Filler, tenant_id: int, calls: dict[str, dict]) -> dict[str, dict]:
    """Each call's answer against an independent query: same total, same ids in the same order."""
    shapes = {}
    for name, params in calls.items():
        answer = list_call(api, params)
        total, ids = filler.expected_ids(tenant_id, {k: v for k, v in params.items() if k != "as"})
        got = [item["task_id"] for item in answer["items"]]
        if answer["total"] != total or got != ids:
            raise AssertionError(f"task.list {params}: total {answer['total']} ids {got[:5]}... "
                                 f"!= expected total {total} ids {ids[:5]}...")
        if answer["page"] != params.get("page", 1) or answer["per_page"] != PER_PAGE:
            raise AssertionError(f"task.list {params}: page/per_page {answer['page']}/{answer['per_page']}")
        shapes[name] = {"total": total, "items": len(got), "bytes": len(json.dumps(answer))}
    return shapes


def time_rounds(targets: dict[str, tuple[Api, dict[str, dict]]], repeats: int,
                warmup: int) -> dict[str, dict]:
    """``targets``: label -> (api, calls). Round-robin: each call on every target back to back (the
    targets' order alternating between rounds), so that drift on the machine hits every one alike."""
    labels = list(targets)
    names = list(next(iter(targets.values()))[1])
    samples = {label: {name: [] for name in names} for label in labels}
    for round_ in range(warmup + repeats):
        order = labels if round_ % 2 == 0 else labels[::-1]
        for name in names:
            for label in order:
                api, calls = targets[label]
                started = time.perf_counter()
                list_call(api, calls[name])
                elapsed = (time.perf_counter() - started) * 1000
                if round_ >= warmup:
                    samples[label][name].append(elapsed)
    return {label: {name: {"median_ms": round(statistics.median(values), 2),
                           "p90_ms": round(percentile(values, 90), 2), "min_ms": round(min(values), 2),
                           "max_ms": round(max(values), 2), "n": len(values)}
                    for name, values in per_call.items()}
            for label, per_call in samples.items()}


# =============================================================================================
# What list_tasks sends to the database, and the plans

def _plan_line_postgres(lines: list[str]) -> str:
    """The plan's nodes on one line, outermost first, each with its actual row count."""
    nodes = []
    for index, line in enumerate(lines):
        stripped = line.strip()
        if index and not stripped.startswith("->"):
            continue   # details: "Index Cond: ...", "Filter: ...", "Buffers: ...", the timings
        stripped = stripped.removeprefix("->").strip()
        rows = re.search(r"actual time=[0-9.]+\.\.[0-9.]+ rows=(\d+)", stripped)
        node = stripped.split(" (actual")[0]
        nodes.append(f"{node} [{rows.group(1)} rows]" if rows else node)
    return " > ".join(nodes)


def explain_list_tasks(database_url: str, tenant_id: int, calls: dict[str, dict]) -> dict[str, dict]:
    """Run engine.tasks.list_tasks in this process; capture its SQL; EXPLAIN each statement."""
    from flask import Flask

    from engine import tasks
    from engine.store.db import db
    from engine.store.driver import configure_sqlite
    from engine.store.unit_of_work import Units

    app = Flask("baton-bench-explain")
    app.config.update(SQLALCHEMY_DATABASE_URI=database_url)
    db.init_app(app)
    report = {}
    with app.app_context():
        postgres = db.engine.dialect.name == "postgresql"
        if not postgres:
            configure_sqlite(db.engine)
        captured: list[tuple[str, object]] = []

        @event.listens_for(db.engine, "before_cursor_execute")
        def _capture(_conn, _cursor, statement, parameters, _context, _many):
            if statement.lstrip().upper().startswith(("SELECT", "WITH")):
                captured.append((statement, parameters))

        uow = Units(None).new("bench")
        for name, params in calls.items():
            captured.clear()
            started = time.perf_counter()
            answer = tasks.list_tasks(uow, tenant_id, page=params.get("page", 1), per_page=PER_PAGE,
                                      where=task_filter(params))
            in_process_ms = (time.perf_counter() - started) * 1000
            statements = list(captured)
            plans = []
            connection = uow.connection()
            for statement, parameters in statements:
                runs = []
                for _ in range(5):
                    begun = time.perf_counter()
                    connection.exec_driver_sql(statement, parameters).all()
                    runs.append((time.perf_counter() - begun) * 1000)
                db_ms = round(statistics.median(runs), 2)
                if postgres:
                    rows = connection.exec_driver_sql(
                        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, parameters).scalars().all()
                    timing = next((r for r in rows if r.startswith("Execution Time")), "")
                    plans.append({"sql": " ".join(statement.split()), "params": _jsonable(parameters),
                                  "plan": rows, "line": _plan_line_postgres(rows), "timing": timing,
                                  "db_ms": db_ms})
                else:
                    rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
                    details = [row[-1] for row in rows]
                    plans.append({"sql": " ".join(statement.split()), "params": _jsonable(parameters),
                                  "plan": details, "line": "; ".join(details), "db_ms": db_ms})
            uow.rollback()
            report[name] = {"statements": len(statements), "items": len(answer["items"]),
                            "in_process_ms": round(in_process_ms, 2), "queries": plans}
        event.remove(db.engine, "before_cursor_execute", _capture)
        db.engine.dispose()
    return report


def task_filter(params: dict):
    """The engine's TaskFilter for a call's params, as rpc/tasks.py builds it."""
    from engine import tasks
    from engine.runtime.task_assignment import group_token, user_token

    audience = None
    if params.get("mine"):
        audience = (user_token(OPERATOR["user"]), *[group_token(g) for g in OPERATOR["groups"]])
    elif "candidate_group" in params:
        audience = (group_token(params["candidate_group"]),)
    return tasks.TaskFilter(status=params.get("status"), instance_id=params.get("instance_id"),
                            definition_id=params.get("definition_id"), audience=audience,
                            assignee=params["assignee"] if "assignee" in params else tasks.ANYONE,
                            overdue=bool(params.get("overdue")), sort=params.get("sort", "created"))


def _jsonable(parameters):
    if isinstance(parameters, dict):
        return {k: v if isinstance(v, (int, str, float, type(None))) else str(v) for k, v in parameters.items()}
    return [v if isinstance(v, (int, str, float, type(None))) else str(v) for v in parameters]


# =============================================================================================
# One backend

def open_task(api: Api, instance_id: int, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
        if items:
            return items[0]
        time.sleep(0.05)
    raise RuntimeError(f"no open task for instance {instance_id}")


def tenant_id_of(database_url: str, name: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT id FROM tenants WHERE name = :n"), {"n": name}).scalar_one()
    finally:
        engine.dispose()


class Setup:
    """One database and a real server on it: two tenants with two definitions each, one real instance."""

    def __init__(self, backend: str, workdir: Path, label: str, seed: int):
        self.backend = backend
        self.label = label
        self.database_url = (f"sqlite:///{workdir / f'{label}.db'}" if backend == "sqlite"
                             else create_postgres_database())
        self.server = BatonServer(self.database_url, workdir)
        self.seed = seed
        self.filler: Filler | None = None
        self.instance_id: int | None = None

    def start(self) -> "Setup":
        self.server.start()
        suffix = uuid.uuid4().hex[:8]
        names = {"measured": f"bench-{suffix}", "other": f"other-{suffix}"}
        keys = {role: self.server.create_tenant(name) for role, name in names.items()}
        self.tenant_ids = {role: tenant_id_of(self.database_url, name) for role, name in names.items()}
        self.apis = {role: self.server.api(key) for role, key in keys.items()}
        self.definitions = {role: [api.deploy(bpmn(BPMN_FILE), code=f"{role}-{code}")["definition_id"]
                                   for code in ("refund", "exchange")] for role, api in self.apis.items()}
        self.api = self.apis["measured"]
        self.api.operator = self.server.api(self.api.call(
            "apikey.create", name="operator", permissions=["task.list"], **OPERATOR)["api_key"])
        # One real instance: its task's form / buttons / element are the filler's template.
        started = self.api.call("process.start", definition_id=self.definitions["measured"][0],
                                variables={"customer": "Zoë", "order": 17})
        real = open_task(self.api, started["instance_id"])
        self.filler = Filler(self.database_url, {k: real[k] for k in ("element_id", "name", "form", "buttons")},
                             seed=self.seed)
        return self

    def fill(self, size: int) -> dict:
        return self.filler.fill({self.tenant_ids[role]: (self.definitions[role], size)
                                 for role in ("measured", "other")})

    def calls(self) -> dict[str, dict]:
        definition_id = self.definitions["measured"][1]
        if self.instance_id is None:   # chosen once: an instance of the first 1,000 tasks, with 5 tasks
            self.instance_id = self.filler.first_instance_with(self.tenant_ids["measured"], definition_id,
                                                               TASKS_PER_INSTANCE)
        return define_calls(self.api, self.instance_id, definition_id)

    def stage(self, calls: dict[str, dict], fills: list[dict]) -> dict:
        measured = self.tenant_ids["measured"]
        other = self.apis["other"].call("task.list", instance_id=self.instance_id)
        if other["total"] != 0:
            raise AssertionError(f"the other tenant sees {other['total']} tasks of instance {self.instance_id}")
        return {"tasks": self.filler.count(measured),
                "other_tenant_tasks": self.filler.count(self.tenant_ids["other"]), "fill": fills,
                "calls": calls, "answers": check_answers(self.api, self.filler, measured, calls)}

    def explain(self, calls: dict[str, dict]) -> dict:
        return explain_list_tasks(self.database_url, self.tenant_ids["measured"], calls)

    def close(self) -> None:
        if self.filler is not None:
            self.filler.close()
        self.server.stop()
        if self.backend == "postgresql":
            drop_postgres_database(self.database_url)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure_backend(backend: str, args, workdir: Path, log=print) -> dict:
    setups: list[Setup] = []
    try:
        if args.sequential:
            # One database: fill to --small, measure; fill to --large, measure.
            setup = Setup(backend, workdir, "bench", args.seed)
            setups.append(setup)
            setup.start()
            stages = {}
            for label, size in (("small", args.small), ("large", args.large)):
                log(f"  {backend}: filling to {size:,} tasks per tenant ...")
                fill = setup.fill(size)
                calls = setup.calls()
                stages[label] = setup.stage(calls, [fill])
                log(f"  {backend}: timing {len(calls)} calls x {args.repeats} on {size:,} tasks ...")
                load_before = _load()
                timings = time_rounds({label: (setup.api, calls)}, args.repeats, args.warmup)
                stages[label]["timings"] = timings[label]
                stages[label]["load_average"] = {"before": load_before, "after": _load()}
                stages[label]["explain"] = setup.explain(calls)
        else:
            # Two databases, each with its own server: one filled to --small, the other to --small and
            # then to --large (same seed: its first --small tasks are the same rows). Both are timed in
            # the same minutes, call by call, so the machine's load hits both alike.
            setups.append(Setup(backend, workdir, "small", args.seed))
            setups.append(Setup(backend, workdir, "large", args.seed))
            small, large = setups
            small.start()
            large.start()
            log(f"  {backend}: filling 'small' to {args.small:,} tasks per tenant ...")
            small_fills = [small.fill(args.small)]
            log(f"  {backend}: filling 'large' to {args.small:,}, then to {args.large:,} tasks per tenant ...")
            large_fills = [large.fill(args.small)]
            large_calls_at_small = large.calls()
            large_fills.append(large.fill(args.large))
            calls = {"small": small.calls(), "large": large.calls()}
            if calls["small"]["instance"] != large_calls_at_small["instance"]:
                raise AssertionError("the two databases disagree on the instance to list")
            stages = {"small": small.stage(calls["small"], small_fills),
                      "large": large.stage(calls["large"], large_fills)}
            log(f"  {backend}: timing {len(calls['small'])} calls x {args.repeats} on each database, "
                f"interleaved ...")
            load_before = _load()
            timings = time_rounds({"small": (small.api, calls["small"]), "large": (large.api, calls["large"])},
                                  args.repeats, args.warmup)
            load_after = _load()
            for label, setup in (("small", small), ("large", large)):
                stages[label].update(timings=timings[label], explain=setup.explain(calls[label]),
                                     load_average={"before": load_before, "after": load_after})
        ratios = {}
        for name in CALL_ORDER:
            ratio = stages["large"]["timings"][name]["median_ms"] / stages["small"]["timings"][name]["median_ms"]
            ratios[name] = {"value": round(ratio, 2), "targeted": name in TARGETED,
                            "met": (ratio <= TARGET_RATIO) if name in TARGETED else None}
        return {"backend": backend, "database": "PostgreSQL" if backend == "postgresql" else "SQLite",
                "mode": "sequential" if args.sequential else "paired", "stages": stages, "ratios": ratios}
    finally:
        for setup in setups:
            try:
                setup.close()
            except Exception as exc:  # noqa: BLE001 - close the others too
                log(f"  {backend}: closing {setup.label} failed: {exc!r}")


# =============================================================================================
# Report

def print_table(report: dict) -> None:
    for backend, result in report["backends"].items():
        print()
        if "error" in result:
            print(f"{backend}: failed: {result['error']}")
            continue
        small, large = result["stages"]["small"], result["stages"]["large"]
        print(f"{result['database']}: task.list over HTTP, per_page {PER_PAGE}, median / p90 of "
              f"{large['timings']['first']['n']} calls; {small['tasks']:,} vs {large['tasks']:,} tasks "
              f"(+ as many in another tenant)")
        print(f"  {'call':<11} {'params (large)':<50} {'small ms':>15} {'large ms':>15} {'ratio':>6}  "
              f"{'SQL':>3}  target")
        for name in CALL_ORDER:
            s, l = small["timings"][name], large["timings"][name]
            ratio = result["ratios"][name]
            verdict = ("met" if ratio["met"] else "NOT MET") if ratio["targeted"] else "(info)"
            params = ",".join(f"{k}={v}" for k, v in large["calls"][name].items()) or "(defaults)"
            statements = large["explain"][name]["statements"]
            print(f"  {name:<11} {params:<50} {s['median_ms']:>7.2f} / {s['p90_ms']:<6.2f} "
                  f"{l['median_ms']:>7.2f} / {l['p90_ms']:<6.2f} {ratio['value']:>6.2f}  {statements:>3}  "
                  f"{verdict}")
        print(f"  load average (1 min) while timing: small {small['load_average']['after'][0]}, "
              f"large {large['load_average']['after'][0]}")
        print(f"  the statements list_tasks sends on {large['tasks']:,} tasks (median of 5 runs from this "
              f"process; plan):")
        for name in CALL_ORDER:
            for query in large["explain"][name]["queries"]:
                print(f"    {name:<11} {query['db_ms']:>7.2f} ms  {query['line']}")
    print(f"\n  target: ratio <= {TARGET_RATIO:g} for {', '.join(TARGETED)}: "
          f"{'met' if report['target_met'] else 'NOT met'}")
    print(f"  {report['machine']['cores']} cores, commit {report['git_commit']}, {report['date']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgresql",
                        help="comma-separated: sqlite, postgresql (default both)")
    parser.add_argument("--small", type=int, default=1000, help="tasks in the first stage (default 1,000)")
    parser.add_argument("--large", type=int, default=100_000, help="tasks in the second stage (default 100,000)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per call and size (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per call first (default 5)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--sequential", action="store_true",
                        help="one database: fill to --small, time, fill to --large, time (default: two databases "
                             "timed side by side)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1,000 vs 10,000 tasks, 10 repeats")
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.quick:
        args.large, args.repeats = min(args.large, 10_000), min(args.repeats, 10)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    for backend in backends:
        if backend not in ("sqlite", "postgresql"):
            parser.error(f"unknown backend {backend!r}")

    run_load_before = os.getloadavg()
    results = {}
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix=f"baton-bench-tasks-{backend}-"))
        try:
            results[backend] = measure_backend(backend, args, workdir, log=lambda m: print(m, flush=True))
        except Exception as exc:  # noqa: BLE001 - report the others; the exit code says it failed
            results[backend] = {"error": f"{type(exc).__name__}: {exc}"}
            for log_file in sorted(workdir.glob("*.log")):
                print(f"--- {log_file.name}\n{log_file.read_text()[-3000:]}", file=sys.stderr)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    met = all("error" not in r and all(v["met"] for v in r["ratios"].values() if v["targeted"])
              for r in results.values())
    report = {
        **run_header(run_load_before, postgresql="postgresql" in results),
        "options": {"backends": backends, "small": args.small, "large": args.large, "repeats": args.repeats,
                    "warmup": args.warmup, "per_page": PER_PAGE, "tasks_per_instance": TASKS_PER_INSTANCE,
                    "completed_share": COMPLETED_SHARE, "seed": args.seed, "quick": args.quick,
                    "mode": "sequential" if args.sequential else "paired"},
        "target": {"ratio_at_most": TARGET_RATIO, "calls": list(TARGETED)},
        "target_met": met,
        "backends": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_table(report)
    print(f"  written to {args.output}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
