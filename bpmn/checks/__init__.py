"""Deploy-time checks of a BPMN file against what Baton runs; each module adds to one ``Issues``.

``CONTAINER_CHECKS`` run on the process and on every subProcess in it (``containers``), so a
subprocess's content is checked exactly like a process's.
"""
from bpmn.checks.calls import called_elements, check_calls
from bpmn.checks.camunda import check_camunda
from bpmn.checks.code import check_code
from bpmn.checks.elements import check_definitions, check_elements, containers, content
from bpmn.checks.events import check_events
from bpmn.checks.flows import check_flows
from bpmn.checks.loops import check_loops
from bpmn.checks.process import (called_in_file, check_start_events, entry_processes, select_process,
                                 select_processes, start_trigger)
from bpmn.checks.properties import check_properties

CONTAINER_CHECKS = (check_elements, check_flows, check_events, check_loops, check_calls,
                    check_properties, check_code, check_camunda)

__all__ = ["CONTAINER_CHECKS", "called_elements", "called_in_file", "check_camunda", "check_definitions",
           "check_start_events", "containers", "content", "entry_processes", "select_process", "select_processes",
           "start_trigger"]
