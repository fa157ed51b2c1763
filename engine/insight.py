"""What the console shows about runs: an instance's path through its diagram, and per-element
counts of a definition (waiting, failed, passed). Read-only; every query is scoped to the tenant.

How a path is read from what is stored is ``read_path``'s business alone; the rest of this module
works on its answer, so a change in how instance state is stored changes that one function.
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

from SpiffWorkflow.util.task import TaskState
from sqlalchemy import exists, func, literal_column, select, true

from engine import json_values
from engine.errors import NotFoundError
from engine.instances import shown_waiting_for
from engine.runtime.outcome import kind_of
from engine.store.db import db, is_postgres, iso
from engine.store.models import Definition, Instance, Task
from engine.store.paging import page_of
from engine.store.workflows import SpecCache

MAX_HISTORY = 500           # newest steps an answer lists; ``history_total`` says how many there were
DEFAULT_SAMPLE, MAX_SAMPLE = 100, 1000
_LIVE = TaskState.WAITING | TaskState.READY | TaskState.STARTED


class Step(NamedTuple):
    """One element an instance reached: when (epoch seconds), which, and how it stands."""

    at: float
    element: dict[str, Any]  # element_id, name, kind
    state: str               # completed | waiting | failed


def instance_path(tenant_id: int, instance_id: int, specs: SpecCache) -> dict[str, Any]:
    row = db.session.execute(select(
        Instance.id, Instance.definition_id, Instance.status, Instance.state, Instance.waiting_for,
        Instance.error, Instance.started_at, Instance.completed_at,
    ).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)).first()
    if row is None:
        raise NotFoundError(f"Instance {instance_id} not found.")
    steps, flows = read_path(specs, tenant_id, row.definition_id, row.state)
    passed: dict[str, dict[str, Any]] = {}
    live_since: dict[str, float] = {}
    for step in steps:
        element_id = step.element["element_id"]
        if step.state == "completed":
            entry = passed.setdefault(element_id, {**step.element, "times": 0, "first_at": step.at})
            entry["times"] += 1
            entry["last_at"] = step.at
        elif step.state == "waiting":
            live_since[element_id] = step.at
    history = [{**step.element, "state": step.state, "at": _iso(step.at)} for step in steps[-MAX_HISTORY:]]
    return {
        "instance_id": row.id, "definition_id": row.definition_id, "status": row.status,
        "started_at": iso(row.started_at), "completed_at": iso(row.completed_at),
        "passed": [{**entry, "first_at": _iso(entry["first_at"]), "last_at": _iso(entry["last_at"])}
                   for entry in passed.values()],
        "flows": [{"from": source, "to": target} for source, target in flows],
        "waiting": _waiting(tenant_id, row, live_since),
        "failed": ({"element_id": (row.error or {}).get("element_id"), "message": (row.error or {}).get("message"),
                    "at": iso(row.completed_at)} if row.status == "failed" else None),
        "history": history, "history_total": len(steps),
    }


def read_path(specs: SpecCache, tenant_id: int, definition_id: int,
              state: str | None) -> tuple[list[Step], list[tuple[str, str]]]:
    """The steps of an instance, oldest first, and the distinct (from, to) element pairs it went
    along: the one reader of a path from what is stored (no workflow is restored, nothing runs).

    It relies on ``instances.state`` being the whole SpiffWorkflow 3.2 task tree as
    ``engine.store.workflows.dump_workflow`` writes it: ``tasks`` (and, per embedded subprocess,
    ``subprocesses[id].tasks`` with ``spec``) maps a task id to its ``task_spec`` name, ``state``
    (a ``TaskState`` bit), ``parent`` id and ``last_state_change`` (epoch seconds); every task an
    instance ever ran stays in the tree (a loop adds a task per pass), and the definition's spec
    names each task spec's ``bpmn_id``. It reads none of Baton's own keys (``state_versions``).
    If finished parts of the tree are pruned (and a compact path log kept instead), this function
    reads that log; nothing else here changes.
    """
    if not state:
        return [], []
    spec, own_subprocesses = specs.get(tenant_id, definition_id)
    tree = json_values.read_stored(state)  # a state saved before the JSON limits still reads
    steps: list[Step] = []
    flows: dict[tuple[str, str], None] = {}
    _walk_workflow(tree, spec, steps, flows)
    for sub in (tree.get("subprocesses") or {}).values():
        # Embedded subprocesses are drawn in this diagram; a call activity's called process is not.
        sub_spec = own_subprocesses.get(sub.get("spec"))
        if sub_spec is not None:
            _walk_workflow(sub, sub_spec, steps, flows)
    steps.sort(key=lambda step: step.at)
    return steps, list(flows)


def _walk_workflow(tree: dict, spec, steps: list, flows: dict) -> None:
    tasks: dict[str, dict] = tree.get("tasks") or {}
    elements: dict[str, dict[str, Any] | None] = {}

    def element(task: dict) -> dict[str, Any] | None:
        name = task.get("task_spec")
        if name not in elements:
            task_spec = spec.task_specs.get(name)
            bpmn_id = getattr(task_spec, "bpmn_id", None)
            elements[name] = None if not bpmn_id else {
                "element_id": bpmn_id, "name": getattr(task_spec, "bpmn_name", None), "kind": kind_of(task_spec)}
        return elements[name]

    visible_parent: dict[str, str | None] = {}

    def source_of(task: dict) -> str | None:
        """The element of the nearest visible ancestor (hidden engine specs sit between elements)."""
        chain, parent_id, found = [], task.get("parent"), None
        while parent_id is not None and parent_id in tasks:
            if parent_id in visible_parent:
                found = visible_parent[parent_id]
                break
            chain.append(parent_id)
            parent = tasks[parent_id]
            if element(parent) is not None:
                found = element(parent)["element_id"]
                break
            parent_id = parent.get("parent")
        for task_id in chain:
            visible_parent[task_id] = found
        return found

    completed = {element(t)["element_id"] for t in tasks.values()
                 if t.get("state") == TaskState.COMPLETED and element(t) is not None}
    for task in tasks.values():
        shown, state = element(task), task.get("state")
        if shown is None:
            continue
        if state == TaskState.COMPLETED:
            kind = "completed"
        elif state == TaskState.ERROR:
            kind = "failed"
        elif state & _LIVE:
            kind = "waiting"
        elif state == TaskState.CANCELLED and shown["element_id"] in completed:
            kind = None  # a join's other branches: their flow in was taken, the element counted once
        else:
            continue
        if kind is not None:
            steps.append(Step(task.get("last_state_change") or 0.0, shown, kind))
        source = source_of(task)
        if source is not None:
            flows[(source, shown["element_id"])] = None


def _waiting(tenant_id: int, row, live_since: dict[str, float]) -> list[dict[str, Any]]:
    if row.status != "running":
        return []
    open_tasks: dict[str, list[int]] = {}
    for task_id, element_id in db.session.execute(select(Task.id, Task.element_id).where(
            Task.tenant_id == tenant_id, Task.instance_id == row.id, Task.status == "in_progress")
            .order_by(Task.id)):
        open_tasks.setdefault(element_id, []).append(task_id)
    waiting = []
    for entry in shown_waiting_for(row.waiting_for):
        since = live_since.get(entry.get("element_id"))
        entry["since"] = _iso(since) if since else None
        if entry.get("element_id") in open_tasks:
            entry["task_ids"] = open_tasks[entry["element_id"]]
        waiting.append(entry)
    return waiting


def _iso(epoch: float) -> str:
    return iso(datetime.fromtimestamp(epoch, timezone.utc))


# --- definition.stats ------------------------------------------------------------------------


def definition_stats(tenant_id: int, definition_id: int, sample: int, specs: SpecCache) -> dict[str, Any]:
    _require_definition(tenant_id, definition_id)
    of_definition = (Instance.tenant_id == tenant_id, Instance.definition_id == definition_id)
    by_status = dict(db.session.execute(
        select(Instance.status, func.count()).where(*of_definition).group_by(Instance.status)).all())
    counts: dict[str, dict[str, int]] = {}

    def bump(element_id: str | None, key: str, amount: int) -> None:
        if element_id:
            counts.setdefault(element_id, {"waiting": 0, "failed": 0, "passed": 0})[key] += amount

    entry = _waiting_entries()
    element = _json_text(entry.c.value, "element_id")
    for element_id, amount in db.session.execute(
            select(element, func.count(func.distinct(Instance.id))).select_from(Instance).join(entry, true())
            .where(*of_definition, Instance.status == "running").group_by(element)):
        bump(element_id, "waiting", amount)
    failed_at = _json_text(Instance.error, "element_id")
    for element_id, amount in db.session.execute(
            select(failed_at, func.count()).where(*of_definition, Instance.status == "failed").group_by(failed_at)):
        bump(element_id, "failed", amount)
    sampled = 0
    if sample:
        states = db.session.execute(select(Instance.state).where(*of_definition)
                                    .order_by(Instance.id.desc()).limit(sample)).scalars().all()
        for state in states:
            steps, _ = read_path(specs, tenant_id, definition_id, state)
            for element_id in {step.element["element_id"] for step in steps if step.state == "completed"}:
                bump(element_id, "passed", 1)
        sampled = len(states)
    return {
        "definition_id": definition_id,
        "instances": {status: by_status.get(status, 0) for status in ("running", "completed", "cancelled", "failed")},
        "elements": [{"element_id": element_id, **values} for element_id, values in sorted(counts.items())],
        "passed_sample": sampled,
    }


def instances_at(tenant_id: int, definition_id: int, element_id: str, state: str,
                 *, page: int, per_page: int) -> dict[str, Any]:
    """The instances of a definition waiting at (running) or failed at one element, newest first."""
    _require_definition(tenant_id, definition_id)
    conditions = [Instance.tenant_id == tenant_id, Instance.definition_id == definition_id]
    if state == "failed":
        conditions += [Instance.status == "failed", _json_text(Instance.error, "element_id") == element_id]
    else:
        entry = _waiting_entries()
        conditions += [Instance.status == "running",
                       exists(select(literal_column("1")).select_from(entry)
                              .where(_json_text(entry.c.value, "element_id") == element_id))]
    query = select(Instance.id, Instance.status, Instance.definition_id, Instance.started_at,
                   Instance.completed_at).where(*conditions)
    return page_of(query, Instance.id, page=page, per_page=per_page, item=lambda r: {
        "instance_id": r.id, "status": r.status, "definition_id": r.definition_id,
        "started_at": iso(r.started_at), "completed_at": iso(r.completed_at)})


def _require_definition(tenant_id: int, definition_id: int) -> None:
    if db.session.execute(select(Definition.id).where(
            Definition.tenant_id == tenant_id, Definition.id == definition_id)).first() is None:
        raise NotFoundError(f"Definition {definition_id} not found.")


def _waiting_entries():
    """The entries of ``instances.waiting_for`` as rows (a correlated table function, in SQL)."""
    if is_postgres():
        return func.json_array_elements(Instance.waiting_for).table_valued("value").alias("entry")
    return func.json_each(Instance.waiting_for).table_valued("value").alias("entry")


def _json_text(column, key: str):
    if is_postgres():
        return column.op("->>")(key)
    return func.json_extract(column, f"$.{key}")

