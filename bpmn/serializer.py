"""Turning specs and workflows into JSON and back: the one configured SpiffWorkflow serializer.

A spec is stored once per definition (``spec_to_json``) and restored once per process into a cache
(``load_spec``). An instance's state is its workflow without the spec (``workflow_to_json``); it is
put back together with the cached spec objects (``workflow_from_json``), so neither saving nor
loading an instance converts its spec.
"""
from __future__ import annotations

import json
import threading
from datetime import date, time
from decimal import Decimal
from typing import Any, Callable
from uuid import UUID

from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
from SpiffWorkflow.bpmn.serializer.default.event_definition import TimerConditionalEventDefinitionConverter
from SpiffWorkflow.bpmn.serializer.default.task_spec import BpmnTaskSpecConverter, EventConverter
from SpiffWorkflow.bpmn.serializer.default.workflow import BpmnWorkflowConverter, WorkflowConverter
from SpiffWorkflow.bpmn.serializer.helpers.encoder import create_encoder
from SpiffWorkflow.bpmn.serializer.helpers.registry import DefaultRegistry
from SpiffWorkflow.bpmn.serializer.workflow import VERSION
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.serializer.config import SPIFF_CONFIG
from SpiffWorkflow.spiff.serializer.event_definition import (
    ErrorEscalationEventDefinitionConverter, ItemAwareEventDefinitionConverter, MessageEventDefinitionConverter)
from SpiffWorkflow.spiff.serializer.task_spec import (
    ServiceTaskConverter, SpiffBpmnTaskConverter, SpiffMultiInstanceConverter)

from bpmn.cron import CronCycleDefinition
from bpmn.dmn.task import DecisionTask
from bpmn.events import EscalationDefinition, ErrorDefinition, MessageDefinition, SignalDefinition
from bpmn.external import ExternalTask
from bpmn.loops import ParallelInstances, SequentialInstances
from bpmn.operators import OperatorTask
from bpmn.scopes import EventSubprocessStart, InterruptingStartEvent, ScopeEndJoin
from engine.errors import BatonError

VERSION_KEY = BpmnWorkflowSerializer.VERSION_KEY

# SpiffWorkflow's spiff configuration plus Baton's spec classes (bpmn.events, .scopes, .loops,
# .operators, .external).
BATON_CONFIG = {**SPIFF_CONFIG, MessageDefinition: MessageEventDefinitionConverter,
                SignalDefinition: ItemAwareEventDefinitionConverter,
                ErrorDefinition: ErrorEscalationEventDefinitionConverter,
                EscalationDefinition: ErrorEscalationEventDefinitionConverter,
                EventSubprocessStart: EventConverter, InterruptingStartEvent: EventConverter,
                ScopeEndJoin: BpmnTaskSpecConverter,
                SequentialInstances: SpiffMultiInstanceConverter,
                ParallelInstances: SpiffMultiInstanceConverter, OperatorTask: ServiceTaskConverter,
                ExternalTask: ServiceTaskConverter, CronCycleDefinition: TimerConditionalEventDefinitionConverter,
                DecisionTask: SpiffBpmnTaskConverter}


class DataRegistry(DefaultRegistry):
    """Spiff's registry, plus the data types process variables may hold, and forgiving of
    dicts in user data that happen to have a ``typename`` key naming no registered type
    (Spiff's own registry crashes on them when it reads an instance back)."""

    def __init__(self):
        super().__init__()
        self.register(Decimal, lambda v: {"value": str(v)}, lambda d: Decimal(d["value"]))
        self.register(date, lambda v: {"value": v.isoformat()}, lambda d: date.fromisoformat(d["value"]))
        self.register(time, lambda v: {"value": v.isoformat()}, lambda d: time.fromisoformat(d["value"]))

    def restore(self, val, **kwargs):
        if isinstance(val, dict) and "typename" in val and val["typename"] not in self.convert_from_dict:
            return {key: self.restore(item, **kwargs) for key, item in val.items()}
        return super().restore(val, **kwargs)


class SpeclessWorkflowConverter(BpmnWorkflowConverter):
    """The top workflow without ``spec``/``subprocess_specs``; they are handed back on restore."""

    def to_dict(self, workflow):
        # BpmnWorkflowConverter.to_dict minus the two spec entries (converting them is the cost).
        dct = WorkflowConverter.to_dict(self, workflow)
        dct["subprocesses"] = self.mapping_to_dict(workflow.subprocesses)
        dct["bpmn_events"] = self.registry.convert(workflow.bpmn_events)
        return dct

    def from_dict(self, dct, spec=None, subprocess_specs=None, script_engine=None):
        # BpmnWorkflowConverter.from_dict, with the cached spec objects handed in and the workflow
        # built around the caller's script engine: the parent builds it without one, and
        # BpmnWorkflow then makes SpiffWorkflow's default engine (eval/exec with full builtins).
        if spec is None:
            raise BatonError("A workflow stored without its spec needs the spec to be restored.")
        if script_engine is None:
            raise BatonError("A workflow is restored with Baton's sandboxed script engine only.")
        workflow = self.target_class(spec, subprocess_specs or {}, script_engine=script_engine, deserializing=True)
        workflow.tasks = self.mapping_from_dict(dct["tasks"], UUID, workflow=workflow)
        workflow.task_tree = workflow.tasks.get(UUID(dct["root"]))
        self.set_default_attributes(workflow, dct)
        self.subprocesses_from_dict(dct["subprocesses"], workflow)
        workflow.bpmn_events = self.registry.restore(dct.get("bpmn_events", []))
        return workflow


def make_serializer() -> BpmnWorkflowSerializer:
    """The serializer of full workflows (spec included), configured for SpiffWorkflow's spiff specs."""
    registry = BpmnWorkflowSerializer.configure(dict(BATON_CONFIG), DataRegistry())
    return BpmnWorkflowSerializer(registry)


def _make_instance_serializer() -> BpmnWorkflowSerializer:
    config = {**BATON_CONFIG, BpmnWorkflow: SpeclessWorkflowConverter}
    return BpmnWorkflowSerializer(BpmnWorkflowSerializer.configure(config, DataRegistry()))


# serialize_json flips a flag on its registry while it runs: one serializer per thread.
_local = threading.local()


def _serializers() -> tuple[BpmnWorkflowSerializer, BpmnWorkflowSerializer]:
    pair = getattr(_local, "pair", None)
    if pair is None:
        pair = _local.pair = (make_serializer(), _make_instance_serializer())
    return pair


def spec_to_json(spec: BpmnProcessSpec, subprocess_specs: dict[str, BpmnProcessSpec]) -> str:
    serializer = _serializers()[0]
    dct = {
        VERSION_KEY: serializer.VERSION,
        "spec": serializer.to_dict(spec),
        "subprocess_specs": {name: serializer.to_dict(sub) for name, sub in subprocess_specs.items()},
    }
    return json.dumps(dct, cls=create_encoder(serializer.registry), ensure_ascii=False)


def load_spec(spec_json: str) -> tuple[BpmnProcessSpec, dict[str, BpmnProcessSpec]]:
    """The spec objects of a stored definition: cheap enough for a per-process cache to call."""
    serializer = _serializers()[0]
    dct = json.loads(spec_json)
    _require_version(dct.get(VERSION_KEY), "definition spec")
    spec = serializer.from_dict(dct["spec"])
    return spec, {name: serializer.from_dict(sub) for name, sub in dct["subprocess_specs"].items()}


def workflow_to_json(workflow: BpmnWorkflow, extra: dict[str, Any] | None = None) -> str:
    """An instance's state: the workflow without its spec (stored once, per definition), and the
    caller's ``extra`` top-level keys (Baton's state version)."""
    serializer = _serializers()[1]
    serializer.registry._encoder_mode = True  # what serialize_json does around to_dict
    try:
        dct = serializer.to_dict(workflow)
        dct[VERSION_KEY] = serializer.VERSION
        dct.update(extra or {})
        return json.dumps(dct, cls=serializer._encoder_cls)
    finally:
        serializer.registry._encoder_mode = False


def workflow_from_json(text: str, spec: BpmnProcessSpec, subprocess_specs: dict[str, BpmnProcessSpec],
                       script_engine: Any, upgrade: Callable[[dict], dict] | None = None) -> BpmnWorkflow:
    """The workflow of ``workflow_to_json``, rebuilt around cached spec objects; ``upgrade`` takes
    the stored dict (with the caller's extra keys) to the current version first.

    ``script_engine`` is required and the workflow is built around it: SpiffWorkflow would
    otherwise make its default engine, which runs ``eval``/``exec`` with full builtins.
    """
    serializer = _serializers()[1]
    dct = json.loads(text)
    _require_version(dct.pop(VERSION_KEY, None), "instance state")
    if upgrade is not None:
        dct = upgrade(dct)
    return serializer.from_dict(dct, spec=spec, subprocess_specs=subprocess_specs, script_engine=script_engine)


def _require_version(version: str | None, what: str) -> None:
    # Spiff's migrations rewrite whole workflow dicts, specs included; a spec-less state cannot
    # be migrated piecewise. A SpiffWorkflow upgrade that changes VERSION must re-parse stored
    # definitions from their XML and migrate instance states with their spec put back.
    if version != VERSION:
        raise BatonError(f"The stored {what} was written by serializer version {version!r}; "
                         f"this build reads {VERSION!r}.")
