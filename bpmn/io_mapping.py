"""Camunda's input/output mapping (``camunda:inputOutput``) on script and service tasks, at run time.

``extensions['io']`` holds ``{"inputs": [[name, python], ...], "outputs": [[name, python], ...]}``,
each value a sandbox expression compiled at deploy (``bpmn.camunda_io``). When the task becomes
ready (after its preScript), each input is evaluated over the variables, in order, and set: the
task, its script or its worker sees it. When the task completes (before its postScript), each
output is evaluated over the task's variables and set for the process; the inputs are local, so
they go (a variable an input shadowed gets its value back) unless an output sets that name.
"""
from __future__ import annotations

from typing import Any

from SpiffWorkflow.spiff.specs.defaults import ScriptTask

_LOCALS = "io_locals"  # internal data: {input name: [had a value before, that value]}


class IoMapping:
    """Mixin of the task specs that may carry ``extensions['io']``; without it, nothing changes."""

    def _update_hook(self, my_task):
        ready = super()._update_hook(my_task)
        io = self.extensions.get("io")
        if ready and io:
            evaluate = my_task.workflow.script_engine.evaluate
            # Kept from an earlier time the task became ready (process.retry): what the process had then.
            shadowed: dict[str, list[Any]] = my_task.internal_data.get(_LOCALS) or {}
            for name, expression in io["inputs"]:
                value = evaluate(my_task, expression)
                shadowed.setdefault(name, [name in my_task.data, my_task.data.get(name)])
                my_task.data[name] = value
            my_task.internal_data[_LOCALS] = shadowed
        return ready

    def _on_complete_hook(self, my_task):
        io = self.extensions.get("io")
        if io:
            evaluate = my_task.workflow.script_engine.evaluate
            outputs = [(name, evaluate(my_task, expression)) for name, expression in io["outputs"]]
            for name, (had, value) in my_task.internal_data.pop(_LOCALS, {}).items():
                if had:
                    my_task.data[name] = value
                else:
                    my_task.data.pop(name, None)
            my_task.data.update(outputs)
        super()._on_complete_hook(my_task)


class MappedScriptTask(IoMapping, ScriptTask):
    """A script task with ``camunda:inputOutput`` (operator and external tasks carry the mixin
    themselves; registered with the serializer)."""
