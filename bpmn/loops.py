"""Multi-instance tasks whose item variables stay inside each instance.

SpiffWorkflow 3.2 merges an instance's data, its ``inputDataItem`` included, back into the
multi-instance task; a sequential one then refuses to start its second instance ("Multiinstance
input item item already exists") unless the model also has a loopDataOutputRef. As in Camunda,
Baton keeps the item (and the output item) local to each instance: they are removed from the
multi-instance task's data before an instance starts and when the task completes.
"""
from __future__ import annotations

from SpiffWorkflow.spiff.specs.defaults import ParallelMultiInstanceTask, SequentialMultiInstanceTask


class _LocalItems:
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


class SequentialInstances(_LocalItems, SequentialMultiInstanceTask):
    pass


class ParallelInstances(_LocalItems, ParallelMultiInstanceTask):
    pass
