"""Multi-instance tasks: item variables local to each instance, and collections checked before use.

SpiffWorkflow 3.2 merges an instance's data, its ``inputDataItem`` included, back into the
multi-instance task; a sequential one then refuses to start its second instance ("Multiinstance
input item item already exists") unless the model also has a loopDataOutputRef. As in Camunda,
Baton keeps the item (and the output item) local to each instance: they are removed from the
multi-instance task's data before an instance starts and when the task completes.

A parallel multi-instance over a missing or non-iterable collection, or with a cardinality that is
not a whole number, makes SpiffWorkflow raise a bare TypeError (``range(None)``), which the engine
cannot tell from a bug of its own. Both kinds check the collection or cardinality first and fail
the element with a WorkflowDataException that names it and what it got.
"""
from __future__ import annotations

from collections.abc import Mapping

from SpiffWorkflow.bpmn.exceptions import WorkflowDataException
from SpiffWorkflow.spiff.specs.defaults import ParallelMultiInstanceTask, SequentialMultiInstanceTask

from bpmn.spiff_internals import inherit_data

_COLLECTIONS = (list, tuple, set, frozenset, Mapping)


class _CheckedLocalItems:
    def _update_hook(self, my_task):
        # The check needs the task's data, which the parent's _update_hook inherits just before it
        # creates instances; inheriting is idempotent, so it is done here first.
        inherit_data(my_task)
        if self.data_input is not None:
            _check_collection(my_task, self.data_input.bpmn_id)
        elif self.cardinality is not None:
            _check_cardinality(my_task, self.cardinality)
        return super()._update_hook(my_task)

    def create_child(self, my_task, item, key_or_index=None):
        self._drop_items(my_task)
        super().create_child(my_task, item, key_or_index)

    def _run_hook(self, my_task):
        self._drop_items(my_task)
        return super()._run_hook(my_task)

    def _drop_items(self, my_task):
        for reference in (self.input_item, self.output_item):
            if reference is not None:
                my_task.data.pop(reference.bpmn_id, None)


class SequentialInstances(_CheckedLocalItems, SequentialMultiInstanceTask):
    pass


class ParallelInstances(_CheckedLocalItems, ParallelMultiInstanceTask):
    pass


def _check_collection(my_task, name: str) -> None:
    missing = name not in my_task.data
    value = my_task.data.get(name)
    if missing or not isinstance(value, _COLLECTIONS):
        got = "nothing (no such variable)" if missing else describe_value(value)
        _fail(my_task, f"The multi-instance collection '{name}' must be a list or a dict; it is {got}.")


def _check_cardinality(my_task, expression: str) -> None:
    value = my_task.workflow.script_engine.evaluate(my_task, expression)
    if type(value) is not int or value < 0:
        _fail(my_task, f"The multi-instance loopCardinality '{expression}' must give a whole number from 0 up; "
                       f"it gave {describe_value(value)}.")


def describe_value(value) -> str:
    """A short phrase for a value a modeler should recognise: ``null``, ``a number (2.5)``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:39] + "…"
        return f"text ({shown!r})"
    return f"a value of type {type(value).__name__}"


def _fail(my_task, message: str) -> None:
    error = WorkflowDataException(message, my_task)
    error.message = message  # what the engine shows (str() of a Spiff exception adds notes)
    raise error
