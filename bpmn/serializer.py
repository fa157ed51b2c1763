"""Turning specs and workflows into JSON and back: the one configured SpiffWorkflow serializer.

A spec is stored once per definition (``spec_to_json``) and restored once per process into a cache
(``load_spec``). An instance's state is its workflow without the spec (``workflow_to_json``); it is
put back together with the cached spec objects (``workflow_from_json``), so neither saving nor
loading an instance converts its spec.

A state is written by orjson (a third of the standard library's time, its checks included) whenever orjson writes it
exactly as the standard library would read it back: typed values (datetimes, UUIDs, decimals ...)
are converted by SpiffWorkflow's registry first, as its JSON encoder does. A state holding what
orjson cannot carry exactly (``NaN`` or an infinity, an integer past 64 bits, a lone surrogate,
nesting past orjson's limit, a type the registry does not know) is written by the standard
library, as every state was before, and read back by it (``_ORJSON_PREFIX`` tells them apart).
"""
from __future__ import annotations

import json
import threading
from datetime import date, time
from decimal import Decimal
from types import ModuleType
from typing import Any, Callable

import orjson
from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
from SpiffWorkflow.bpmn.serializer.default.event_definition import (
    MultipleEventDefinitionConverter, TimerConditionalEventDefinitionConverter)
from SpiffWorkflow.bpmn.serializer.default.task_spec import BpmnTaskSpecConverter, EventConverter
from SpiffWorkflow.bpmn.serializer.helpers.encoder import create_encoder
from SpiffWorkflow.bpmn.serializer.helpers.registry import DefaultRegistry
from SpiffWorkflow.bpmn.serializer.workflow import VERSION
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.serializer.config import SPIFF_CONFIG
from SpiffWorkflow.spiff.serializer.event_definition import (
    ErrorEscalationEventDefinitionConverter, ItemAwareEventDefinitionConverter, MessageEventDefinitionConverter)
from SpiffWorkflow.spiff.serializer.task_spec import (
    ScriptTaskConverter, ServiceTaskConverter, SpiffBpmnTaskConverter, SpiffMultiInstanceConverter)

from bpmn.cron import CronCycleDefinition
from bpmn.dmn.task import DecisionTask
from bpmn.events import (ConditionDefinition, EscalationDefinition, ErrorDefinition, MessageDefinition,
                         MultipleDefinition, SignalDefinition)
from bpmn.external import ExternalTask
from bpmn.loops import ParallelInstances, SequentialInstances
from bpmn.operators import OperatorTask
from bpmn.io_mapping import MappedScriptTask
from bpmn.scopes import EventSubprocessStart, InterruptingStartEvent, ScopeEndJoin
from bpmn.spiff_internals import SpeclessWorkflowConverter, data_slots, encoder_mode
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
                DecisionTask: SpiffBpmnTaskConverter, ConditionDefinition: TimerConditionalEventDefinitionConverter,
                MultipleDefinition: MultipleEventDefinitionConverter, MappedScriptTask: ScriptTaskConverter}


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


def make_serializer() -> BpmnWorkflowSerializer:
    """The serializer of full workflows (spec included), configured for SpiffWorkflow's spiff specs."""
    registry = BpmnWorkflowSerializer.configure(dict(BATON_CONFIG), DataRegistry())
    return BpmnWorkflowSerializer(registry)


def _make_instance_serializer() -> BpmnWorkflowSerializer:
    config = {**BATON_CONFIG, BpmnWorkflow: SpeclessWorkflowConverter}
    return BpmnWorkflowSerializer(BpmnWorkflowSerializer.configure(config, DataRegistry()))


# Writing a state flips a flag on its registry while it runs (spiff_internals.encoder_mode): one
# serializer per thread.
_local = threading.local()


def _serializers() -> tuple[BpmnWorkflowSerializer, BpmnWorkflowSerializer, type[json.JSONEncoder]]:
    """The full serializer, the instance serializer and its standard-library encoder class."""
    found = getattr(_local, "serializers", None)
    if found is None:
        instance = _make_instance_serializer()
        found = _local.serializers = (make_serializer(), instance, create_encoder(instance.registry))
    return found


def spec_registry():
    """The full serializer's registry (this thread's): what ``bpmn.migration`` compares specs with."""
    return _serializers()[0].registry


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
    _full, serializer, encoder = _serializers()
    with encoder_mode(serializer.registry):  # what serialize_json does around to_dict
        dct = {VERSION_KEY: serializer.VERSION, **serializer.to_dict(workflow), **(extra or {})}
        try:
            ready = _orjson_ready(dct, serializer.registry)
            return orjson.dumps(ready, option=_ORJSON_OPTIONS).decode()
        except (_NotExact, orjson.JSONEncodeError):
            return json.dumps(dct, cls=encoder)


# States orjson writes start with this (the version key first, its text value right after the
# colon); the standard library's writes never do (its default separator puts a space between).
_ORJSON_PREFIX = '{"' + VERSION_KEY + '":"'
# Should a value the registry did not convert reach orjson anyway, it refuses it (and the standard
# library writes the state) instead of writing it its own way.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS
_ORJSON_MAX_DEPTH = 240  # orjson refuses past 254 levels; the state itself takes up to 6
_INT_MIN, _INT_END = -2**63, 2**64  # orjson writes the integers of this range (json: any)


class _NotExact(Exception):
    """The state holds a value orjson would not write as the standard library reads it back."""


def _orjson_ready(state: dict[str, Any], registry) -> dict[str, Any]:
    """``state`` with the typed values of its data parts converted by the registry. The dicts
    that hold the parts are the converter's own, made for this state; the parts themselves may be
    the workflow's data, so ``_ready`` copies what it changes."""
    for holder, key in data_slots(state):
        value = holder[key]
        if value:  # most parts are empty
            ready = _ready(value, registry, 0)
            if ready is not value:
                holder[key] = ready
    return state


def _ready(value: Any, registry, depth: int) -> Any:
    """``value`` as orjson should get it: the same object when nothing in it needs converting,
    else a copy with what SpiffWorkflow's JSON encoder (``create_encoder``) converts converted.
    _NotExact when orjson cannot write it exactly. (Plain values are checked inline: a call per
    value would cost more than orjson's whole write.)"""
    kind = type(value)
    if kind is dict or kind is list or kind is tuple:
        if depth > _ORJSON_MAX_DEPTH:
            raise _NotExact
        if kind is dict:
            for key in value:
                if type(key) is not str:
                    raise _NotExact  # json writes 1, True, None keys as text; orjson refuses them
            pairs = value.items()
        else:
            pairs = enumerate(value)
        copy = None
        for slot, item in pairs:
            kind = type(item)
            if kind is str or kind is bool or item is None:
                continue
            if kind is int:
                if _INT_MIN <= item < _INT_END:
                    continue
                raise _NotExact
            if kind is float:
                if item - item == 0.0:  # finite (NaN and the infinities give NaN)
                    continue
                raise _NotExact
            if not item and (kind is dict or kind is list):
                continue
            ready = _ready(item, registry, depth + 1)
            if ready is not item:
                if copy is None:
                    copy = dict(value) if type(value) is dict else list(value)
                copy[slot] = ready
        return value if copy is None else copy
    if kind is str or kind is bool or value is None:
        return value
    if kind is int or kind is float:
        _ready([value], registry, depth)  # _NotExact unless orjson writes it exactly
        return value
    typename = registry.typenames.get(kind)
    if typename is not None:
        return _ready(registry.convert_to_dict[typename](value), registry, depth + 1)
    if callable(value) or isinstance(value, ModuleType):
        return None
    if isinstance(value, set):
        return _ready(list(value), registry, depth + 1)
    raise _NotExact


def workflow_from_json(text: str, spec: BpmnProcessSpec, subprocess_specs: dict[str, BpmnProcessSpec],
                       script_engine: Any, upgrade: Callable[[dict], dict] | None = None) -> BpmnWorkflow:
    """The workflow of ``workflow_to_json``, rebuilt around cached spec objects; ``upgrade`` takes
    the stored dict (with the caller's extra keys) to the current version first.

    ``script_engine`` is required and the workflow is built around it: SpiffWorkflow would
    otherwise make its default engine, which runs ``eval``/``exec`` with full builtins.
    """
    if spec is None:
        raise BatonError("A workflow stored without its spec needs the spec to be restored.")
    if script_engine is None:
        raise BatonError("A workflow is restored with Baton's sandboxed script engine only.")
    serializer = _serializers()[1]
    dct = orjson.loads(text) if text.startswith(_ORJSON_PREFIX) else json.loads(text)
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
