"""Deploy-time checks of a BPMN file against what Baton runs; each module adds to one ``Issues``."""
from bpmn.checks.code import check_code
from bpmn.checks.elements import check_definitions, check_elements
from bpmn.checks.flows import check_flows
from bpmn.checks.process import check_start_events, select_process
from bpmn.checks.properties import check_properties

__all__ = ["check_code", "check_definitions", "check_elements", "check_flows", "check_properties",
           "check_start_events", "select_process"]
