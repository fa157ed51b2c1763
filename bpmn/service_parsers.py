"""Parsers of the tasks that hand work outside the flow: operator and external service tasks,
send tasks, business rule tasks (their spec classes: ``bpmn.operators``, ``bpmn.external``,
``bpmn.dmn.task``).
"""
from __future__ import annotations

from SpiffWorkflow.spiff.parser.event_parsers import SpiffSendTaskParser
from SpiffWorkflow.spiff.parser.task_spec import SpiffTaskParser

from bpmn import profile
from bpmn.dmn.task import DecisionTask, decision_config, decision_ref
from bpmn.external import ExternalTask, topic_of
from bpmn.parser_mixins import EventMixin, ProfileMixin


class OperatorTaskParser(ProfileMixin, SpiffTaskParser):
    """A serviceTask: an ``OperatorTask`` when its ``operator`` property names what the engine does,
    else an ``ExternalTask`` that waits for a worker (``bpmn.external``).

    An operator's settings are templates, not Python expressions: the task has no parameters, they
    stay in ``extensions['properties']`` for the engine to render, and ``extensions['operator']``
    names it. It is ``manual``: ``do_engine_steps`` leaves it READY and the engine runs the operator
    itself, then runs the task. An external task's topic is in ``extensions['external']``.
    """

    def create_task(self):
        properties = profile.read_properties(self.node)
        if not properties.get("operator"):
            return create_external_task(self)
        return self.spec_class(
            self.spec, self.bpmn_id,
            operation_name=properties.get("operator", ""),
            operation_params={},
            result_variable=properties.get("result_variable") or None,
            manual=True,
            **self.bpmn_attributes)

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and not extensions["properties"].get("operator"):
            extensions["external"] = topic_of(self.node)
        else:
            extensions["operator"] = extensions["properties"].get("operator", "")
        return extensions


def create_external_task(parser) -> ExternalTask:
    return ExternalTask(parser.spec, parser.bpmn_id, operation_name=topic_of(parser.node)["topic"],
                        operation_params={}, result_variable=None, **parser.bpmn_attributes)


class BatonSendTaskParser(EventMixin, SpiffSendTaskParser):
    """A sendTask with a messageRef throws that message; one without is a Camunda 7 send task,
    implemented like a service task (a Java delegate or an external topic): an external task."""

    def create_task(self):
        if self.node.get("messageRef"):
            return super().create_task()
        return create_external_task(self)

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and not self.node.get("messageRef"):
            extensions["external"] = topic_of(self.node)
        return extensions


class BusinessRuleTaskParser(ProfileMixin, SpiffTaskParser):
    """A businessRuleTask: a ``DecisionTask`` carrying its decision (from the DMN files given to the
    parser as ``decisions``), or an external task when it is implemented like a service task."""

    @staticmethod
    def get_decision_ref(node):  # SpiffWorkflow's BpmnDmnParser asks every business rule task parser
        return decision_ref(node)

    def create_task(self):
        if decision_ref(self.node) is None:
            return create_external_task(self)
        return DecisionTask(self.spec, self.bpmn_id, **self.bpmn_attributes)

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and decision_ref(self.node) is None:
            extensions["external"] = topic_of(self.node)
        elif node is None:
            extensions["decision"] = decision_config(self.node, self.process_parser.parser.decisions)
        return extensions
