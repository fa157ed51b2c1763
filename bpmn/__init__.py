"""BPMN uploads: hardened XML parsing, Baton's extension profile, validation, (de)serialization.

The engine uses only what is re-exported here.
"""
from bpmn.deploy import ParsedDefinition, StartEventInfo, TimerStartInfo, parse_definition, parse_definitions
from bpmn.events import awaited_correlation, message_event, signal_event, start_at, thrown_events
from bpmn.serializer import load_spec, make_serializer, workflow_from_json, workflow_to_json
from bpmn.specs import all_task_specs, operators_used

from bpmn.cron import cron_next_after
from bpmn.external import complete_external_task, is_external_task, throw_bpmn_error, waiting_external_tasks

__all__ = ["ParsedDefinition", "StartEventInfo", "TimerStartInfo", "all_task_specs", "awaited_correlation",
           "complete_external_task",
           "cron_next_after", "is_external_task", "load_spec", "make_serializer", "message_event", "operators_used",
           "parse_definition", "parse_definitions", "signal_event", "start_at", "throw_bpmn_error", "thrown_events",
           "waiting_external_tasks", "workflow_from_json", "workflow_to_json"]
