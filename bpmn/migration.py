"""Two versions of a process compared, and a running workflow moved onto the newer one (contract
§5.7), built on SpiffWorkflow 3.2's ``SpiffWorkflow.bpmn.util.diff``.

``SpecDiff`` aligns the task specs of two versions (by element id first, by structure where an id is
gone) and compares each aligned pair through the serializer's registry. ``diff_definitions``
reports it by element id: ``added`` and ``removed`` ids, and ``changed`` ids (kept ids whose element
differs: its kind, its flows, its properties).

``Migration`` is SpiffWorkflow's ``diff_workflow`` + ``migrate_workflow`` with two differences, so
that a migrated instance keeps what it waits at exactly as it was:

* The safety rule: every element the workflow is at (a task that waits, runs, is ready or failed,
  in the top process or any subprocess) must exist in the new version under the same id with the
  same kind (``kind``: the BPMN element kind, e.g. ``userTask``); else the migration is refused,
  naming each such element and why. A finished task whose element is gone is refused as well when
  the tree still holds it (the caller prunes what nothing reads again first).
* ``migrate_workflow`` resets every ready and waiting task (``Task.reset_branch``): a new task
  state, internal data cleared, so a timer's due time would start again and an AI dialog lose its
  place. Here the tasks keep their ids, states, data and internal data; their specs are re-pointed
  and only the predicted branch below each of them is predicted again from the new spec
  (``spiff_internals.repredict``). Human-task, external-task and subscription rows that name a
  task by its id therefore stay valid.

``SpecDiff``'s alignment only walks from the start event along outputs; a spec it does not reach
(an event subprocess's start, say) is aligned here by id, so ``WorkflowDiff`` never misses one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from SpiffWorkflow.bpmn.specs.control import BoundaryEventSplit
from SpiffWorkflow.bpmn.util.diff import SpecDiff, WorkflowDiff
from SpiffWorkflow.util.task import TaskState

from bpmn import spiff_internals as spiff
from bpmn.serializer import spec_registry

# A task of these states is "where the workflow is": it must exist, with its kind, in the new version.
AT_STATES = TaskState.READY | TaskState.WAITING | TaskState.STARTED | TaskState.ERROR
_PREDICTED = TaskState.PREDICTED_MASK | TaskState.FUTURE


def spec_diff(old, new) -> SpecDiff:
    """SpiffWorkflow's ``SpecDiff`` of two process specs, with every old spec aligned (by id where
    its walk from the start event did not reach it)."""
    diff = SpecDiff(spec_registry(), old, new)
    for spec in old.task_specs.values():
        if spec not in diff.alignment:
            candidate = new.task_specs.get(spec.name)
            diff.alignment[spec] = candidate
            if candidate is not None:
                diff.comparisons[spec] = spiff.compare_specs(diff, spec, candidate)
    return diff


def diff_definitions(old_specs: tuple, new_specs: tuple) -> dict[str, list[str]]:
    """``{added, removed, changed}``: element ids (each sorted) between two definitions' own specs
    (``(spec, subprocess_specs)`` as ``bpmn.load_spec`` returns them), embedded subprocesses included."""
    old_top, old_subs = old_specs
    new_top, new_subs = new_specs
    pairs = [(old_top, new_top)] + [(old_subs[name], new_subs.get(name)) for name in old_subs]
    pairs += [(None, new_subs[name]) for name in new_subs if name not in old_subs]
    added: set[str] = set()
    removed: set[str] = set()
    changed: set[str] = set()
    for old, new in pairs:
        old_ids = _element_ids(old)
        new_ids = _element_ids(new)
        added |= new_ids - old_ids
        removed |= old_ids - new_ids
        if old is not None and new is not None:
            diff = spec_diff(old, new)
            changed |= {spec.bpmn_id for spec, candidate in diff.alignment.items()
                        if candidate is not None and spec.bpmn_id and spec.name == candidate.name
                        and diff.comparisons.get(spec)}
    return {"added": sorted(added), "removed": sorted(removed - added), "changed": sorted(changed)}


def _element_ids(spec) -> set[str]:
    return {ts.bpmn_id for ts in spec.task_specs.values() if ts.bpmn_id} if spec is not None else set()


def _boundary_events(spec) -> list[str]:
    """The ids of the boundary events attached to an element (SpiffWorkflow puts a
    ``BoundaryEventSplit`` before it, whose other outputs are the events)."""
    for parent in spec.inputs:
        if isinstance(parent, BoundaryEventSplit):
            return sorted(out.bpmn_id or out.name for out in parent.outputs if out is not spec)
    return []


@dataclass
class Refusal:
    element_id: str
    reason: str

    def __str__(self) -> str:
        return f"'{self.element_id}' {self.reason}"


class Migration:
    """A workflow (restored with its old specs) checked against new specs; ``refusals`` empty when
    it may move, then ``apply`` moves it (in place)."""

    def __init__(self, workflow, new_specs: tuple, kind: Callable[[Any], str]):
        self.workflow = workflow
        self.new_top, self.new_subs = new_specs
        self.parts: list[tuple[Any, WorkflowDiff | None, Any]] = []  # (workflow or subprocess, diff, new spec)
        self.parts.append((workflow, WorkflowDiff(workflow, spec_diff(workflow.spec, self.new_top)), self.new_top))
        self.orphans: list[tuple[Any, Any]] = []  # (subprocess, its task) with no spec in the target
        for task_id, subprocess in workflow.subprocesses.items():
            new = self.new_subs.get(subprocess.spec.name)
            if new is subprocess.spec:
                continue  # a called process at its pinned version: the very same spec, nothing moves
            if new is None:
                self.orphans.append((subprocess, workflow.get_task_from_id(task_id)))
                continue
            self.parts.append((subprocess, WorkflowDiff(subprocess, spec_diff(subprocess.spec, new)), new))
        self.refusals = self._check(kind)

    def _check(self, kind: Callable[[Any], str]) -> list[Refusal]:
        refusals: dict[str, Refusal] = {}
        for part, diff, _new in self.parts:
            for task in part.get_tasks(skip_subprocesses=True):
                spec = task.task_spec
                if not spec.bpmn_id or task.has_state(_PREDICTED):
                    continue
                new = diff.alignment.get(task) if diff is not None else None
                same_id = new is not None and new.name == spec.name
                if task.has_state(AT_STATES):
                    where = "the instance is at" if task.state != TaskState.STARTED else "running below the instance"
                    if not same_id:
                        refusals.setdefault(spec.bpmn_id, Refusal(
                            spec.bpmn_id, f"({kind(spec)}, {where}) is not in the target version"))
                    elif kind(new) != kind(spec):
                        refusals.setdefault(spec.bpmn_id, Refusal(
                            spec.bpmn_id, f"({where}) is a {kind(spec)} here and a {kind(new)} in the target version"))
                    elif _boundary_events(new) != _boundary_events(spec):
                        refusals.setdefault(spec.bpmn_id, Refusal(
                            spec.bpmn_id, f"({where}) has other boundary events in the target version "
                                          f"({', '.join(_boundary_events(new)) or 'none'} instead of "
                                          f"{', '.join(_boundary_events(spec)) or 'none'}); they are set up when "
                                          "the element opens, so migrate it once it has moved past"))
                elif new is None:
                    refusals.setdefault(spec.bpmn_id, Refusal(
                        spec.bpmn_id, f"({kind(spec)}, passed and still read by the instance) is not in the "
                                      "target version"))
        for subprocess, task in self.orphans:
            element = task.task_spec.bpmn_id or task.task_spec.name
            if element not in refusals:
                refusals[element] = Refusal(element, f"({kind(task.task_spec)}) runs process '{subprocess.spec.name}', "
                                                     "which the target version does not run there")
        return list(refusals.values())

    def apply(self) -> None:
        """Move the workflow onto the new specs: specs re-pointed, predictions made again."""
        for part, diff, new in self.parts:
            part.spec = new
            for task in part.tasks.values():
                aligned = diff.alignment.get(task)
                if aligned is not None:
                    task.task_spec = aligned
        self.workflow.subprocess_specs = self.new_subs
        for part, _diff, _new in self.parts:
            for task in list(part.tasks.values()):
                if task.id in part.tasks and task.has_state(AT_STATES) and spiff.can_repredict(task):
                    spiff.repredict(task)

    def leftovers(self) -> list[str]:
        """Tasks still on a spec that is not the new version's, or predicted where the new version's
        flows do not lead (none, unless SpiffWorkflow's tree holds something this module did not
        foresee): the caller refuses the migration."""
        found = []
        for part, _diff, new in self.parts:
            for task in part.tasks.values():
                spec = task.task_spec
                if new.task_specs.get(spec.name) is not spec:
                    found.append(spec.bpmn_id or spec.name)
                elif (task.has_state(_PREDICTED) and not task.triggered and task.parent is not None
                      and spec not in task.parent.task_spec.outputs):
                    found.append(spec.bpmn_id or spec.name)  # a prediction the new flows do not make
        return sorted(set(found))
