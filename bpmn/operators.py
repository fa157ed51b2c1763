"""Operator service tasks (``operator = http`` ...): specs the engine runs itself.

An ``OperatorTask`` is ``manual``, so ``do_engine_steps`` leaves it READY; the engine calls out
(outside the instance's lock), puts the answer into the task's data and then ``task.run()``s it,
which only completes it (SpiffWorkflow's ServiceTask would ask the script engine to call the
service). Its settings are in ``extensions['operator']`` and ``extensions['properties']``.
"""
from __future__ import annotations

from SpiffWorkflow.spiff.specs.defaults import ServiceTask


class OperatorTask(ServiceTask):

    def _execute(self, task):
        return True  # the engine has done the work and stored its result before running the task
