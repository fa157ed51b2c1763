"""BPMN, Baton's profile of it: what an instance's state is made of, and deploying a model.

Re-exported here is what a running instance needs, which reaches nothing of the engine but its
errors: the spec classes' serializer, the specs of a workflow, its events and external tasks, the
next time of a cron timer. Deploying is ``bpmn.deploy`` (hardened XML parsing, the extension
profile, validation, translation of Camunda's expressions and DMN cells): it checks a model's code
with the sandbox's own rules, so only the use cases that deploy load the sandbox through it.
"""
from bpmn.events import (awaited_correlation, message_event, refresh_conditions, signal_event, start_at,
                         thrown_events)
from bpmn.serializer import load_spec, make_serializer, workflow_from_json, workflow_to_json
from bpmn.specs import all_task_specs, answer, any_task_spec, operators_used
from bpmn import spiff_internals
from bpmn.cron import cron_next_after
from bpmn.external import complete_external_task, is_external_task, throw_bpmn_error, waiting_external_tasks
from bpmn.task_throws import boundary_catchers, throw_at_task

__all__ = ["all_task_specs", "answer", "any_task_spec", "awaited_correlation", "boundary_catchers", "throw_at_task", "complete_external_task", "cron_next_after",
           "is_external_task", "load_spec", "make_serializer", "message_event", "operators_used", "refresh_conditions",
           "signal_event",
           "spiff_internals", "start_at", "throw_bpmn_error", "thrown_events", "waiting_external_tasks",
           "workflow_from_json", "workflow_to_json"]
