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
from engine.instances import LIST_COLUMNS, list_item, shown_waiting_for
from engine.runtime.outcome import kind_of
from engine.store.db import iso
from engine.store.models import Definition, Instance, InstanceSteps, Task
from engine.store.pruning import FROM
from engine.store.paging import page_of
from engine.store.workflows import SpecCache
from engine.store.unit_of_work import UnitOfWork

MAX_HISTORY = 500           # newest steps an answer lists; ``history_total`` says how many there were
DEFAULT_SAMPLE, MAX_SAMPLE = 100, 1000
_LIVE = TaskState.WAITING | TaskState.READY | TaskState.STARTED


class Step(NamedTuple):
    """One element an instance reached: when (epoch seconds), which, and how it stands."""

    at: float
    element: dict[str, Any]  # element_id, name, kind
    state: str               # completed | waiting | failed


def instance_path(uow: UnitOfWork, tenant_id: int, instance_id: int, specs: SpecCache) -> dict[str, Any]:
    row = uow.execute(select(
        Instance.id, Instance.definition_id, Instance.status, Instance.state, Instance.waiting_for,
        Instance.error, Instance.started_at, Instance.completed_at,
    ).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)).first()
    if row is None:
        raise NotFoundError(f"Instance {instance_id} not found.")
    logged = _logged_steps(uow, tenant_id, [row.id]).get(row.id, [])
    steps, flows = read_path(uow, specs, tenant_id, row.definition_id, row.state, logged)
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
        "waiting": _waiting(uow, tenant_id, row, live_since),
        "failed": ({"element_id": (row.error or {}).get("element_id"), "message": (row.error or {}).get("message"),
                    "at": iso(row.completed_at)} if row.status == "failed" else None),
        "history": history, "history_total": len(steps),
    }


def _logged_steps(uow: UnitOfWork, tenant_id: int, instance_ids: list[int]) -> dict[int, list[list[Any]]]:
    """The path rows pruned from these instances' trees (``instance_steps``), oldest first."""
    found: dict[int, list[list[Any]]] = {}
    if not instance_ids:
        return found
    for instance_id, rows in uow.execute(
            select(InstanceSteps.instance_id, InstanceSteps.steps)
            .where(InstanceSteps.tenant_id == tenant_id, InstanceSteps.instance_id.in_(instance_ids))
            .order_by(InstanceSteps.instance_id, InstanceSteps.id)):
        found.setdefault(instance_id, []).extend(rows)
    return found


def read_path(uow: UnitOfWork, specs: SpecCache, tenant_id: int, definition_id: int, state: str | None,
              logged: list[list[Any]] = ()) -> tuple[list[Step], list[tuple[str, str]]]:
    """The steps of an instance, oldest first, and the distinct (from, to) element pairs it went
    along: the one reader of a path from what is stored (no workflow is restored, nothing runs).

    What is stored is two parts, which never overlap: the rows of ``instance_steps`` (``logged``:
    ``[at, process, task spec, from element, TaskState]`` for each element pruned from the tree,
    ``engine.store.pruning``) and the pruned tree in ``instances.state`` as
    ``engine.store.workflows.dump_workflow`` writes it: ``tasks`` (and, per embedded subprocess,
    ``subprocesses[id].tasks`` with ``spec``) maps a task id to its ``task_spec`` name, ``state``
    (a ``TaskState`` bit), ``parent`` id and ``last_state_change`` (epoch seconds); a task whose
    parent was pruned names the element its flow came from in ``internal_data["baton_from"]``. A
    Baton state of version 1 is a whole tree and has no rows. The definition's spec names each
    task spec's ``bpmn_id``.
    """
    if not state and not logged:
        return [], []
    spec, own_subprocesses = specs.get(uow, tenant_id, definition_id)
    shown = {spec.name: spec, **{name: sub for name, sub in own_subprocesses.items()}}
    steps: list[Step] = []
    flows: dict[tuple[str, str], None] = {}
    walks = [_Walk(spec)]
    walks[0].add_logged(logged, shown, steps, flows)
    tree = json_values.read_stored(state) if state else {}  # a state saved before the JSON limits still reads
    walks[0].add_tree(tree)
    for sub in (tree.get("subprocesses") or {}).values():
        # Embedded subprocesses are drawn in this diagram; a call activity's called process is not.
        sub_spec = own_subprocesses.get(sub.get("spec"))
        if sub_spec is not None:
            walks.append(_Walk(sub_spec))
            walks[-1].add_tree(sub)
    completed = set(walks[0].completed_logged)
    for walk in walks:
        completed |= walk.completed_in_tree()
    walks[0].settle_logged(completed, steps, flows)
    for walk in walks:
        walk.settle_tree(completed, steps, flows)
    steps.sort(key=lambda step: step.at)
    return steps, list(flows)


class _Walk:
    """The elements of one (sub)process's tree, and of the rows logged for any of them."""

    def __init__(self, spec):
        self.spec = spec
        self.tasks: dict[str, dict] = {}
        self.elements: dict[tuple[str, str], dict[str, Any] | None] = {}
        self.logged: list[tuple[float, dict[str, Any], str | None, int]] = []
        self.completed_logged: set[str] = set()
        self.visible_parent: dict[str, str | None] = {}

    def element(self, task_spec_name: str, spec=None) -> dict[str, Any] | None:
        spec = spec or self.spec
        key = (spec.name, task_spec_name)
        if key not in self.elements:
            task_spec = spec.task_specs.get(task_spec_name)
            bpmn_id = getattr(task_spec, "bpmn_id", None)
            self.elements[key] = None if not bpmn_id else {
                "element_id": bpmn_id, "name": getattr(task_spec, "bpmn_name", None), "kind": kind_of(task_spec)}
        return self.elements[key]

    def add_logged(self, logged, shown: dict, steps: list, flows: dict) -> None:
        for at, process, task_spec_name, source, state in logged:
            spec = shown.get(process)
            element = self.element(task_spec_name, spec) if spec is not None else None
            if element is None:
                continue  # a called process's element: not drawn in this diagram
            self.logged.append((at, element, source, state))
            if state == TaskState.COMPLETED:
                self.completed_logged.add(element["element_id"])

    def settle_logged(self, completed: set[str], steps: list, flows: dict) -> None:
        for at, element, source, state in self.logged:
            kind = _kind(state, element["element_id"], completed)
            if kind is False:
                continue
            if kind is not None:
                steps.append(Step(at or 0.0, element, kind))
            if source is not None:
                flows[(source, element["element_id"])] = None

    def add_tree(self, tree: dict) -> None:
        self.tasks = tree.get("tasks") or {}

    def completed_in_tree(self) -> set[str]:
        return {self.element(t.get("task_spec"))["element_id"] for t in self.tasks.values()
                if t.get("state") == TaskState.COMPLETED and self.element(t.get("task_spec")) is not None}

    def settle_tree(self, completed: set[str], steps: list, flows: dict) -> None:
        for task in self.tasks.values():
            shown = self.element(task.get("task_spec"))
            if shown is None:
                continue
            kind = _kind(task.get("state"), shown["element_id"], completed)
            if kind is False:
                continue
            if kind is not None:
                steps.append(Step(task.get("last_state_change") or 0.0, shown, kind))
            source = self.source_of(task)
            if source is not None:
                flows[(source, shown["element_id"])] = None

    def source_of(self, task: dict) -> str | None:
        """The element of the nearest visible ancestor (hidden engine specs sit between elements);
        a task re-attached by pruning names it itself."""
        chain, current, found = [], task, None
        while True:
            internal = current.get("internal_data") or {}
            if FROM in internal:
                found = internal[FROM]
                break
            parent_id = current.get("parent")
            if parent_id is None or parent_id not in self.tasks:
                break
            if parent_id in self.visible_parent:
                found = self.visible_parent[parent_id]
                break
            chain.append(parent_id)
            parent = self.tasks[parent_id]
            if self.element(parent.get("task_spec")) is not None:
                found = self.element(parent.get("task_spec"))["element_id"]
                break
            current = parent
        for task_id in chain:
            # A hidden task's own marker is its source: a task below it sees the same.
            self.visible_parent[task_id] = found
        return found


def _kind(state: int | None, element_id: str, completed: set[str]) -> str | None | bool:
    """How a task shows: a step kind, None for a flow only (a join's other branches: their flow in
    was taken, the element counted once), False for nothing."""
    if state == TaskState.COMPLETED:
        return "completed"
    if state == TaskState.ERROR:
        return "failed"
    if state is not None and state & _LIVE:
        return "waiting"
    if state == TaskState.CANCELLED and element_id in completed:
        return None
    return False


def _waiting(uow: UnitOfWork, tenant_id: int, row, live_since: dict[str, float]) -> list[dict[str, Any]]:
    if row.status != "running":
        return []
    open_tasks: dict[str, list[int]] = {}
    for task_id, element_id in uow.execute(select(Task.id, Task.element_id).where(
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


def definition_stats(uow: UnitOfWork, tenant_id: int, definition_id: int, sample: int, specs: SpecCache) -> dict[str, Any]:
    _require_definition(uow, tenant_id, definition_id)
    of_definition = (Instance.tenant_id == tenant_id, Instance.definition_id == definition_id)
    by_status = dict(uow.execute(
        select(Instance.status, func.count()).where(*of_definition).group_by(Instance.status)).all())
    counts: dict[str, dict[str, int]] = {}

    def bump(element_id: str | None, key: str, amount: int) -> None:
        if element_id:
            counts.setdefault(element_id, {"waiting": 0, "failed": 0, "passed": 0})[key] += amount

    entry = _waiting_entries(uow)
    element = _json_text(uow, entry.c.value, "element_id")
    for element_id, amount in uow.execute(
            select(element, func.count(func.distinct(Instance.id))).select_from(Instance).join(entry, true())
            .where(*of_definition, Instance.status == "running").group_by(element)):
        bump(element_id, "waiting", amount)
    failed_at = _json_text(uow, Instance.error, "element_id")
    for element_id, amount in uow.execute(
            select(failed_at, func.count()).where(*of_definition, Instance.status == "failed").group_by(failed_at)):
        bump(element_id, "failed", amount)
    sampled = 0
    if sample:
        states = uow.execute(select(Instance.id, Instance.state).where(*of_definition)
                                    .order_by(Instance.id.desc()).limit(sample)).all()
        logged = _logged_steps(uow, tenant_id, [instance_id for instance_id, _ in states])
        for instance_id, state in states:
            steps, _ = read_path(uow, specs, tenant_id, definition_id, state, logged.get(instance_id, []))
            for element_id in {step.element["element_id"] for step in steps if step.state == "completed"}:
                bump(element_id, "passed", 1)
        sampled = len(states)
    return {
        "definition_id": definition_id,
        "instances": {status: by_status.get(status, 0) for status in ("running", "completed", "cancelled", "failed")},
        "elements": [{"element_id": element_id, **values} for element_id, values in sorted(counts.items())],
        "passed_sample": sampled,
    }


def instances_at(uow: UnitOfWork, tenant_id: int, definition_id: int, element_id: str, state: str,
                 *, page: int, per_page: int) -> dict[str, Any]:
    """The instances of a definition waiting at (running) or failed at one element, newest first."""
    _require_definition(uow, tenant_id, definition_id)
    conditions = [Instance.tenant_id == tenant_id, Instance.definition_id == definition_id]
    if state == "failed":
        conditions += [Instance.status == "failed", _json_text(uow, Instance.error, "element_id") == element_id]
    else:
        entry = _waiting_entries(uow)
        conditions += [Instance.status == "running",
                       exists(select(literal_column("1")).select_from(entry)
                              .where(_json_text(uow, entry.c.value, "element_id") == element_id))]
    return page_of(uow, select(*LIST_COLUMNS).where(*conditions), Instance.id,
                   page=page, per_page=per_page, item=list_item)


def _require_definition(uow: UnitOfWork, tenant_id: int, definition_id: int) -> None:
    if uow.execute(select(Definition.id).where(
            Definition.tenant_id == tenant_id, Definition.id == definition_id)).first() is None:
        raise NotFoundError(f"Definition {definition_id} not found.")


def _waiting_entries(uow: UnitOfWork):
    """The entries of ``instances.waiting_for`` as rows (a correlated table function, in SQL)."""
    if uow.postgres:
        return func.json_array_elements(Instance.waiting_for).table_valued("value").alias("entry")
    return func.json_each(Instance.waiting_for).table_valued("value").alias("entry")


def _json_text(uow: UnitOfWork, column, key: str):
    if uow.postgres:
        return column.op("->>")(key)
    return func.json_extract(column, f"$.{key}")

