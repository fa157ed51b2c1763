"""The only place that turns an instance row into a live SpiffWorkflow workflow and back.

Specs are parsed once per definition at deploy and stored once; here they are restored once per
process and cached (definitions never change, so the cache is never stale). Instance state is the
workflow JSON without its spec.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from sqlalchemy import select

from bpmn import load_spec, workflow_from_json, workflow_to_json
from engine.db import db
from engine.models import Definition


class SpecCache:
    """Restored specs by definition id, least recently used dropped past ``size``."""

    def __init__(self, size: int = 512):
        self._size = size
        self._specs: OrderedDict[int, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, tenant_id: int, definition_id: int) -> tuple:
        with self._lock:
            specs = self._specs.get(definition_id)
            if specs is not None:
                self._specs.move_to_end(definition_id)
                return specs
        spec_json = db.session.execute(select(Definition.spec_json).where(
            Definition.tenant_id == tenant_id, Definition.id == definition_id)).scalar_one()
        specs = load_spec(spec_json)
        with self._lock:
            self._specs[definition_id] = specs
            while len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return specs


def new_workflow(specs: tuple, script_engine) -> BpmnWorkflow:
    spec, subprocess_specs = specs
    return BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)


def restore_workflow(state: str, specs: tuple, script_engine) -> BpmnWorkflow:
    spec, subprocess_specs = specs
    return workflow_from_json(state, spec, subprocess_specs, script_engine)


def dump_workflow(workflow: BpmnWorkflow) -> str:
    return workflow_to_json(workflow)
