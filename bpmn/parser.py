"""Baton's SpiffWorkflow parser: Spiff's own, reading Baton's profile into ``task_spec.extensions``.

Every spec class stays one SpiffWorkflow already knows how to serialize; Baton's configuration
rides along in ``extensions`` (plain data), so no custom converter is needed.
"""
from __future__ import annotations

import textwrap

from SpiffWorkflow.bpmn.parser.task_parsers import ConditionalGatewayParser, GatewayParser
from SpiffWorkflow.bpmn.parser.util import full_tag
from SpiffWorkflow.bpmn.specs.defaults import (
    EndEvent, ExclusiveGateway, InclusiveGateway, ParallelGateway, StartEvent)
from SpiffWorkflow.spiff.parser.event_parsers import SpiffEndEventParser, SpiffStartEventParser
from SpiffWorkflow.spiff.parser.process import SpiffBpmnParser
from SpiffWorkflow.spiff.parser.task_spec import ScriptTaskParser, SpiffTaskParser, UserTaskParser
from SpiffWorkflow.spiff.specs.defaults import ManualTask, NoneTask, ScriptTask, ServiceTask, UserTask

from bpmn import profile


def clean_script(text: str | None) -> str | None:
    """A script body as written in XML, indented with the markup: dedented, so Python accepts it."""
    if text is None:
        return None
    return textwrap.dedent(text).strip("\n") or None


def clean_condition(text: str | None) -> str | None:
    return (text.strip() or None) if text is not None else None


class ProfileMixin:
    """Adds ``extensions['properties']`` from Camunda and SpiffArena properties alike."""

    def parse_extensions(self, node=None):
        node = self.node if node is None else node
        extensions = super().parse_extensions(node)
        extensions["properties"] = profile.read_properties(node)
        return extensions


class HumanTaskMixin(ProfileMixin):
    """User and manual tasks also carry the form fields and buttons ``task.list`` shows."""

    def parse_extensions(self, node=None):
        node = self.node if node is None else node
        extensions = super().parse_extensions(node)
        extensions["form"] = profile.read_form(node)
        extensions["buttons"] = profile.read_buttons(extensions["properties"])
        return extensions


class TaskParser(ProfileMixin, SpiffTaskParser):
    pass


class HumanTaskParser(HumanTaskMixin, SpiffTaskParser):
    pass


class BatonUserTaskParser(HumanTaskMixin, UserTaskParser):
    pass


class BatonScriptTaskParser(ProfileMixin, ScriptTaskParser):
    def create_task(self):
        script = None
        for child in self.node:
            if isinstance(child.tag, str) and child.tag == full_tag("script"):
                script = clean_script(child.text)
        return self.spec_class(self.spec, self.bpmn_id, script, **self.bpmn_attributes)


class OperatorTaskParser(ProfileMixin, SpiffTaskParser):
    """A serviceTask of Baton's profile: the ``operator`` property names what the engine does.

    It becomes SpiffWorkflow's own ServiceTask (serializable as is) with no parameters: the
    operator's settings are templates, not Python expressions, and stay in
    ``extensions['properties']`` for the engine to render.
    """

    def create_task(self):
        properties = profile.read_properties(self.node)
        return self.spec_class(
            self.spec, self.bpmn_id,
            operation_name=properties.get("operator", ""),
            operation_params={},
            result_variable=properties.get("result_variable") or None,
            **self.bpmn_attributes)


class BatonStartEventParser(ProfileMixin, SpiffStartEventParser):
    pass


class BatonEndEventParser(ProfileMixin, SpiffEndEventParser):
    pass


class BatonConditionalGatewayParser(ProfileMixin, ConditionalGatewayParser):
    def parse_condition(self, sequence_flow):
        return clean_condition(super().parse_condition(sequence_flow))


class BatonGatewayParser(ProfileMixin, GatewayParser):
    pass


class BatonBpmnParser(SpiffBpmnParser):
    """SpiffBpmnParser with Baton's profile; validation (``bpmn.rules``) runs before it."""

    # A copy: the parent's dict is shared by every SpiffBpmnParser in the process.
    OVERRIDE_PARSER_CLASSES = {
        **SpiffBpmnParser.OVERRIDE_PARSER_CLASSES,
        full_tag("task"): (TaskParser, NoneTask),
        full_tag("userTask"): (BatonUserTaskParser, UserTask),
        full_tag("manualTask"): (HumanTaskParser, ManualTask),
        full_tag("scriptTask"): (BatonScriptTaskParser, ScriptTask),
        full_tag("serviceTask"): (OperatorTaskParser, ServiceTask),
        full_tag("startEvent"): (BatonStartEventParser, StartEvent),
        full_tag("endEvent"): (BatonEndEventParser, EndEvent),
        full_tag("exclusiveGateway"): (BatonConditionalGatewayParser, ExclusiveGateway),
        full_tag("inclusiveGateway"): (BatonConditionalGatewayParser, InclusiveGateway),
        full_tag("parallelGateway"): (BatonGatewayParser, ParallelGateway),
    }
