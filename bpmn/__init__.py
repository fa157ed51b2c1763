"""BPMN uploads: hardened XML parsing, Baton's extension profile, validation, (de)serialization.

The engine uses only what is re-exported here.
"""
from bpmn.deploy import ParsedDefinition, StartEventInfo, TimerStartInfo, parse_definition
from bpmn.events import message_event, start_at
from bpmn.serializer import load_spec, make_serializer, workflow_from_json, workflow_to_json
from bpmn.specs import all_task_specs, operators_used

__all__ = ["ParsedDefinition", "StartEventInfo", "TimerStartInfo", "all_task_specs", "load_spec", "make_serializer",
           "message_event", "operators_used", "parse_definition", "start_at", "workflow_from_json", "workflow_to_json"]
