"""Operator service tasks (``operator = http`` ...): specs the engine runs itself.

An ``OperatorTask`` is ``manual``, so ``do_engine_steps`` leaves it READY; the engine calls out
(outside the instance's lock), puts the answer into the task's data and then ``task.run()``s it,
which only completes it (SpiffWorkflow's ServiceTask would ask the script engine to call the
service). Its settings are in ``extensions['operator']`` and ``extensions['properties']``.
"""
from __future__ import annotations

from SpiffWorkflow.spiff.specs.defaults import ServiceTask

from bpmn.io_mapping import IoMapping

# The operators of the profile, by name (one place: the parser, the checks and the engine use these).
HTTP, SEND_MESSAGE, AI_CHAT = "http", "send_message", "ai_chat"
# Operators that call nobody run inside the advance (send_message), or in their own jobs that
# never hold the instance (ai_chat's dialog); only the others are dispatched to operator jobs.
INLINE_OPERATORS = frozenset({SEND_MESSAGE, AI_CHAT})


def operator_of(task_spec) -> str | None:
    """The ``operator`` of a task spec the engine runs itself, else None."""
    return task_spec.extensions.get("operator") if task_spec.manual and getattr(task_spec, "extensions", None) else None


class OperatorTask(IoMapping, ServiceTask):

    def _execute(self, task):
        return True  # the engine has done the work and stored its result before running the task
