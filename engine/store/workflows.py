"""The only place that turns an instance row into a live SpiffWorkflow workflow and back.

Specs are parsed once per definition at deploy and stored once; here they are restored once per
process and cached (definitions never change, so the cache is never stale). Instance state is the
workflow JSON without its spec.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

# The mixin: the BPMN and the Spiff parsers build different CallActivity classes that share it.
from SpiffWorkflow.bpmn.specs.mixins.subworkflow_task import CallActivity
from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from sqlalchemy import bindparam, select

from bpmn import load_spec, workflow_from_json, workflow_to_json
from engine.errors import CallActivityError
from engine.store import state_versions
from engine.store.driver import Statement
from engine.store.models import Definition
from engine.store.unit_of_work import UnitOfWork


class SpecCache:
    """Restored specs by definition id, least recently used dropped past ``size``."""

    def __init__(self, size: int = 512):
        self._size = size
        self._specs: OrderedDict[int, tuple] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, uow: UnitOfWork, tenant_id: int, definition_id: int) -> tuple:
        with self._lock:
            specs = self._specs.get(definition_id)
            if specs is not None:
                self._specs.move_to_end(definition_id)
                return specs
        spec_json, code = uow.execute(select(Definition.spec_json, Definition.code).where(
            Definition.tenant_id == tenant_id, Definition.id == definition_id)).one()
        _remember_code(definition_id, code)
        specs = load_spec(spec_json)
        with self._lock:
            self._specs[definition_id] = specs
            while len(self._specs) > self._size:
                self._specs.popitem(last=False)
        return specs

    def resolve(self, uow: UnitOfWork, tenant_id: int, definition_id: int,
                pinned: dict[str, int] | None) -> tuple[tuple, dict]:
        """The specs to run a definition with, call activity targets included.

        A call activity names another definition's code; it runs that code's latest version at the
        time the instance first needs it, and keeps that version (``pinned``) for the rest of its life,
        so a re-deploy never changes a subprocess under a running instance.
        """
        spec, subprocess_specs = self.get(uow, tenant_id, definition_id)
        pinned = dict(pinned or {})
        composed = dict(subprocess_specs)
        pending = _called_codes(spec, composed)
        while pending:
            code = pending.pop()
            if code in composed:
                continue
            if len(composed) > MAX_CALLED_SPECS:
                raise CallActivityError(f"More than {MAX_CALLED_SPECS} processes are called; is a call recursive?")
            if code not in pinned:
                pinned[code] = latest_definition_id(uow, tenant_id, code)
            called_spec, called_subprocesses = self.get(uow, tenant_id, pinned[code])
            composed[code] = called_spec
            composed.update({k: v for k, v in called_subprocesses.items() if k not in composed})
            pending |= _called_codes(called_spec, composed)
        return (spec, composed), pinned


MAX_CALLED_SPECS = 50


def _called_codes(spec, known: dict) -> set[str]:
    specs = [spec, *known.values()]
    return {ts.spec for s in specs for ts in s.task_specs.values()
            if isinstance(ts, CallActivity) and ts.spec not in known}


_RAISE = object()
_codes: dict[int, str] = {}  # definition id -> its code (never changes); filled as specs are loaded
MAX_CODES = 4096


_CODE = Statement(select(Definition.code).where(Definition.id == bindparam("definition_id")))


def definition_code(uow: UnitOfWork, definition_id: int) -> str:
    """The code of a definition (what metrics are labelled with): from memory once known."""
    code = _codes.get(definition_id)
    if code is None:
        [(code,)] = uow.rows(_CODE, {"definition_id": definition_id})
        _remember_code(definition_id, code)
    return code


def _remember_code(definition_id: int, code: str) -> None:
    if len(_codes) >= MAX_CODES:
        _codes.clear()
    _codes[definition_id] = code


def latest_definition_id(uow: UnitOfWork, tenant_id: int, code: str, *, missing: Any = _RAISE) -> int:
    """The id of the code's latest version; when there is none, ``missing`` if given, else
    CallActivityError (a call activity names a process that is not deployed)."""
    found = uow.execute(
        select(Definition.id).where(Definition.tenant_id == tenant_id, Definition.code == code)
        .order_by(Definition.version.desc()).limit(1)).scalar_one_or_none()
    if found is None:
        if missing is not _RAISE:
            return missing
        raise CallActivityError(f"The called process '{code}' is not deployed.")
    return found


def new_workflow(specs: tuple, script_engine) -> BpmnWorkflow:
    spec, subprocess_specs = specs
    return BpmnWorkflow(spec, subprocess_specs, script_engine=script_engine)


def restore_workflow(state: str, specs: tuple, script_engine) -> BpmnWorkflow:
    spec, subprocess_specs = specs
    return workflow_from_json(state, spec, subprocess_specs, script_engine, upgrade=state_versions.upgrade)


def dump_workflow(workflow: BpmnWorkflow) -> str:
    return workflow_to_json(workflow, state_versions.STAMP)
