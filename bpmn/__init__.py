"""BPMN uploads: hardened XML parsing, Baton's extension profile, validation, (de)serialization.

The engine uses only what is re-exported here.
"""
from bpmn.deploy import ParsedDefinition, StartEventInfo, parse_definition
from bpmn.serializer import load_spec, make_serializer, workflow_from_json, workflow_to_json

__all__ = ["ParsedDefinition", "StartEventInfo", "load_spec", "make_serializer", "parse_definition",
           "workflow_from_json", "workflow_to_json"]
