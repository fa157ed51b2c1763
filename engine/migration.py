"""Live instances moved to another version of their process: ``definition.diff`` and
``process.migrate`` (contract §5.7; ``bpmn.migration`` does the SpiffWorkflow side).

A call is checked whole before anything changes: the target exists in the tenant, every instance
exists in the tenant (``not_found`` naming the ids), none has ended (``conflict``: completed or
cancelled; a failed instance may move, and ``process.retry`` then runs it on the new version), and
every instance runs a version of the target's code (``invalid_params``). Then each instance is
moved in a unit of work of its own, committed before the next one begins (``Then`` steps): an
instance is all or nothing, and a process killed in the middle of a bulk migration leaves each
instance on its old version or wholly on the new one; the same call again finishes the rest
(an instance already on the target answers ``migrated``, with ``reason`` saying so).

Moving one instance takes the locks a save takes, in its order (its jobs, then the instance), reads
its row, restores the workflow with its old specs, prunes what nothing reads again, checks the
safety rule and moves the workflow (``bpmn.migration``), then writes in one transaction: the new
state, ``definition_id``, ``waiting_for`` and pinned call targets with the revision moved on
(compare-and-swap on the revision read: a worker advancing the instance meanwhile loses its save
and runs its job again, on the new version), the ``definition_id`` of its human-task and
external-task rows, its subscriptions when what it waits for changed (rewritten, never added to),
and a ``migrated`` history event. Its jobs (timers, queued messages, task completions) stay as they
are: they name tasks by ids the migration keeps.

A dry run does every check and the move in memory, and writes nothing.
"""
from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select, update

from bpmn.migration import Migration, diff_definitions
from engine.errors import BatonError, ConflictError, InvalidParamsError, NotFoundError
from engine.runtime import subscription_rows
from engine.runtime.outcome import kind_of, summarize
from engine.runtime.routing import QUEUED
from engine.sandbox.script_engine import NOTHING_RUNS
from engine.store import history, pruning, workflows, writes
from engine.store.models import Definition, ExternalTaskRow, Instance, Job, Task
from engine.store.unit_of_work import Then, UnitOfWork

log = logging.getLogger("baton.migration")

MAX_INSTANCES = 100
MIGRATED, REFUSED, WOULD_MIGRATE = "migrated", "refused", "would_migrate"
_ENDED = ("completed", "cancelled")




def _definition(uow: UnitOfWork, tenant_id: int, definition_id: int, param: str) -> Definition:
    found = uow.execute(select(Definition).where(Definition.tenant_id == tenant_id,
                                                 Definition.id == definition_id)).scalar_one_or_none()
    if found is None:
        raise NotFoundError(f"Definition {definition_id} not found ({param}).")
    return found


def diff(uow: UnitOfWork, tenant_id: int, from_id: int, to_id: int, specs: workflows.SpecCache) -> dict[str, Any]:
    """``{added, removed, changed}`` element ids from one definition to another (any two of the tenant's)."""
    old = _definition(uow, tenant_id, from_id, "from_definition_id")
    new = _definition(uow, tenant_id, to_id, "to_definition_id")
    result = diff_definitions(specs.get(uow, tenant_id, old.id), specs.get(uow, tenant_id, new.id))
    return {"from_definition_id": old.id, "to_definition_id": new.id, "code": new.code,
            "from_version": old.version, "to_version": new.version, **result}


def migrate(uow: UnitOfWork, tenant_id: int, instance_ids: list[int], to_definition_id: int, dry_run: bool,
            specs: workflows.SpecCache) -> dict[str, Any] | Then:
    """Check the whole call, then move each instance in its own unit of work (a dry run: in this
    one, writing nothing). The module's docstring has the rules."""
    target = _definition(uow, tenant_id, to_definition_id, "to_definition_id")
    seen: set[int] = set()
    for instance_id in instance_ids:
        if instance_id in seen:
            raise InvalidParamsError(f"Instance {instance_id} is named twice in 'instance_ids'.",
                                     data={"param": "instance_ids"})
        seen.add(instance_id)
    rows = {row.id: row for row in uow.execute(
        select(Instance.id, Instance.status, Definition.code, Definition.version)
        .join(Definition, Definition.id == Instance.definition_id)
        .where(Instance.tenant_id == tenant_id, Instance.id.in_(instance_ids)))}
    missing = [instance_id for instance_id in instance_ids if instance_id not in rows]
    if missing:
        raise NotFoundError(f"Instance{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} not found.",
                            data={"param": "instance_ids"})
    for instance_id in instance_ids:
        row = rows[instance_id]
        if row.code != target.code:
            raise InvalidParamsError(
                f"Instance {instance_id} runs process '{row.code}', not '{target.code}': an instance moves only "
                f"to another version of its own process.", data={"param": "to_definition_id"})
    ended = [instance_id for instance_id in instance_ids if rows[instance_id].status in _ENDED]
    if ended:
        raise ConflictError(f"Instance {ended[0]} is {rows[ended[0]].status}: an ended instance cannot be migrated"
                            + (f" (nor {', '.join(map(str, ended[1:]))})." if len(ended) > 1 else "."),
                            data={"instance_ids": ended})
    if dry_run:
        return {"to_definition_id": target.id, "version": target.version, "dry_run": True,
                "results": [_move(uow, tenant_id, instance_id, target, specs, write=False)
                            for instance_id in instance_ids]}
    return _next(tenant_id, list(instance_ids), target.id, target.version, target.code, specs, [])


def _next(tenant_id: int, pending: list[int], target_id: int, target_version: int, code: str,
          specs: workflows.SpecCache, results: list[dict[str, Any]]) -> dict[str, Any] | Then:
    """The step that moves the first pending instance in a unit of work of its own, then the rest."""
    if not pending:
        return {"to_definition_id": target_id, "version": target_version, "dry_run": False, "results": results}

    def step(uow: UnitOfWork, _value: Any) -> dict[str, Any] | Then:
        target = _definition(uow, tenant_id, target_id, "to_definition_id")
        results.append(_move(uow, tenant_id, pending[0], target, specs, write=True))
        return _next(tenant_id, pending[1:], target_id, target_version, code, specs, results)

    return Then(step)


_COLUMNS = (Instance.id, Instance.status, Instance.revision, Instance.state, Instance.definition_id,
            Instance.called_definitions, Instance.waiting_for)


def _move(uow: UnitOfWork, tenant_id: int, instance_id: int, target: Definition, specs: workflows.SpecCache,
          *, write: bool) -> dict[str, Any]:
    """Move one instance (``write``), or find whether it would move; its result entry."""
    query = select(*_COLUMNS).where(Instance.tenant_id == tenant_id, Instance.id == instance_id)
    if write:
        # The lock order of a save (docs/internals.md): the instance's jobs, then the instance.
        uow.execute(select(Job.id).where(Job.instance_id == instance_id).order_by(Job.id).with_for_update())
        # FOR NO KEY UPDATE on PostgreSQL: as strong as the save's UPDATE, and it lets a call that
        # adds a job of the instance meanwhile (its foreign key takes KEY SHARE on the instance;
        # task.complete does so while holding its task row, which the move updates next) go on
        # instead of deadlocking with the move.
        query = query.with_for_update(key_share=True)
    row = uow.execute(query).one_or_none()
    if row is None:
        return _refused(instance_id, "it was deleted meanwhile")
    if row.definition_id == target.id:
        return {"instance_id": instance_id, "status": MIGRATED if write else WOULD_MIGRATE,
                "reason": f"already on version {target.version}"}
    if row.status in _ENDED:
        return _refused(instance_id, f"it is {row.status}")
    if row.state is None:
        return _refused(instance_id, "it has not taken its first step yet; migrate it once it waits")
    try:
        moved = _moved_workflow(uow, tenant_id, row, target, specs)
    except BatonError as exc:
        return _refused(instance_id, exc.message)
    except Exception:  # SpiffWorkflow could not move this tree: the instance stays as it was
        log.exception("instance %s could not be moved to definition %s", instance_id, target.id)
        return _refused(instance_id, "the engine could not move its state to the target version (see the log)")
    if isinstance(moved, str):
        return _refused(instance_id, moved)
    if not write:
        return {"instance_id": instance_id, "status": WOULD_MIGRATE}
    workflow, pinned, steps = moved
    _write(uow, tenant_id, row, target, workflow, pinned, steps)
    return {"instance_id": instance_id, "status": MIGRATED}


def _refused(instance_id: int, reason: str) -> dict[str, Any]:
    return {"instance_id": instance_id, "status": REFUSED, "reason": reason}


def _moved_workflow(uow: UnitOfWork, tenant_id: int, row, target: Definition, specs: workflows.SpecCache):
    """The instance's workflow moved onto ``target`` (with the call targets pinned and the path rows
    of what was pruned first), or the reason it may not move."""
    old_specs, pinned = specs.resolve(uow, tenant_id, row.definition_id, row.called_definitions)
    new_specs, new_pinned = specs.resolve(uow, tenant_id, target.id, pinned)
    workflow = workflows.restore_workflow(row.state, old_specs, NOTHING_RUNS)
    steps = pruning.prune(workflow, above=0)  # what nothing reads again need not exist in the target
    migration = Migration(workflow, new_specs, kind_of)
    if migration.refusals:
        return "; ".join(f"element {refusal}" for refusal in migration.refusals)
    migration.apply()
    leftovers = migration.leftovers()
    if leftovers:
        return f"elements {', '.join(leftovers)} could not be placed in the target version"
    return workflow, new_pinned, steps


def _write(uow: UnitOfWork, tenant_id: int, row, target: Definition, workflow, pinned: dict,
           steps: list[list[Any]]) -> None:
    outcome = summarize(workflow, None)
    values: dict[str, Any] = {"definition_id": target.id, "state": outcome.state, "revision": row.revision + 1,
                              "called_definitions": pinned or None}
    waiting_for = row.waiting_for
    if row.status == "running":
        if outcome.status != "running":
            raise BatonError(f"Instance {row.id} would not be running after the migration.")
        # What an element waits for is as it was: the element and its task are the same. The
        # correlation values were computed by the sandbox when it began to wait (here no code
        # runs), and a message already accepted for it keeps its claim.
        before = {entry.get("element_id"): entry for entry in row.waiting_for or []}
        waiting_for = []
        for entry in outcome.waiting_for:
            old = before.get(entry["element_id"], {})
            entry = {k: v for k, v in entry.items() if k != "correlation"}
            if old.get("correlation"):
                entry["correlation"] = old["correlation"]
            if old.get(QUEUED):
                entry[QUEUED] = True
            waiting_for.append(entry)
        values["waiting_for"] = waiting_for
    moved = uow.execute(update(Instance).where(Instance.id == row.id, Instance.revision == row.revision)
                        .values(**values)).rowcount
    if moved != 1:  # cannot happen under the instance's row lock; never write half
        raise ConflictError(f"Instance {row.id} changed while it was migrated; migrate it again.")
    writes.add_path_steps(uow, tenant_id, row.id, steps + outcome.steps)
    uow.execute(update(Task).where(Task.instance_id == row.id).values(definition_id=target.id))
    uow.execute(update(ExternalTaskRow).where(ExternalTaskRow.instance_id == row.id).values(definition_id=target.id))
    if row.status == "running" and subscription_rows.changed(row.waiting_for, waiting_for):
        subscription_rows.sync(uow, tenant_id, row.id, waiting_for)
    from_version = uow.execute(select(Definition.version).where(Definition.id == row.definition_id)).scalar_one()
    history.record(uow, tenant_id=tenant_id, instance_id=row.id, kind="migrated",
                   detail={"from_version": from_version, "to_version": target.version,
                           "from_definition_id": row.definition_id, "to_definition_id": target.id})
