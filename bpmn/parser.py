"""Baton's SpiffWorkflow parser: Spiff's own, reading Baton's profile into ``task_spec.extensions``.

Spec classes are SpiffWorkflow's own, except those of ``bpmn.events``, ``bpmn.scopes`` and
``bpmn.loops`` (registered in ``bpmn.serializer``); Baton's configuration rides along in
``extensions`` (plain data). Beyond the profile, this parser decides how a few things are read:

* timer texts become the Python expressions SpiffWorkflow evaluates (``bpmn.timers``);
* a message's (signal's) name is its ``name`` attribute, else its id; a message's correlation
  properties ride in ``extensions['correlation']`` for the engine, not in Spiff's own matching;
* a top-level timer start event becomes a none start event whose timer is in
  ``extensions['timer']``: the engine schedules new instances, so the instance must not wait again;
* error and escalation start events are read (Spiff reads them as none start events), and event
  subprocesses are recognised and wired from the start of their scope (``bpmn.scopes``);
* operator service tasks are ``manual``, so ``do_engine_steps`` leaves them to the engine; service
  and send tasks without an operator (or message) are external tasks (``bpmn.external``).
"""
from __future__ import annotations

from SpiffWorkflow.bpmn.parser.event_parsers import (
    CANCEL_EVENT_XPATH, ERROR_EVENT_XPATH, ESCALATION_EVENT_XPATH, MESSAGE_EVENT_XPATH, SIGNAL_EVENT_XPATH,
    TERMINATION_EVENT_XPATH, TIMER_EVENT_XPATH, EventBasedGatewayParser)
from SpiffWorkflow.bpmn.parser.task_parsers import ConditionalGatewayParser, GatewayParser
from SpiffWorkflow.bpmn.parser.util import full_tag
from SpiffWorkflow.bpmn.specs.defaults import (
    BoundaryEvent, EndEvent, EventBasedGateway, ExclusiveGateway, InclusiveGateway,
    IntermediateCatchEvent, IntermediateThrowEvent, ParallelGateway, StartEvent)
from SpiffWorkflow.bpmn.specs.event_definitions.simple import NoneEventDefinition
from SpiffWorkflow.bpmn.specs.control import StartEventJoin, StartEventSplit
from SpiffWorkflow.bpmn.specs.mixins.subworkflow_task import SubWorkflowTask as SubWorkflowTaskMixin
from SpiffWorkflow.spiff.parser.event_parsers import (
    SpiffBoundaryEventParser, SpiffEndEventParser, SpiffIntermediateCatchEventParser,
    SpiffIntermediateThrowEventParser, SpiffReceiveTaskParser, SpiffStartEventParser)
from SpiffWorkflow.spiff.parser.process import SpiffBpmnParser, SpiffProcessParser
from SpiffWorkflow.spiff.parser.task_spec import (
    CallActivityParser, ScriptTaskParser, SpiffTaskParser, SubWorkflowParser, UserTaskParser)
from SpiffWorkflow.spiff.specs.defaults import (
    CallActivity, ManualTask, NoneTask, ReceiveTask, ScriptTask, SendTask, SubWorkflowTask, UserTask)

from bpmn import profile
from bpmn.dmn.task import DecisionTask
from bpmn.operators import OperatorTask
from bpmn.parser_mixins import (  # clean_*, message_name, ... are also read from here by callers
    EventMixin, HumanTaskMixin, ProfileMixin, clean_condition, clean_script, event_subprocess_start_class,
    is_top_level_timer_start, message_name, signal_name)
from bpmn.scopes import ScopeEndJoin, connect_event_subprocess
from bpmn.service_parsers import BatonSendTaskParser, BusinessRuleTaskParser, OperatorTaskParser
from bpmn.timers import read_timer

__all__ = ["BatonBpmnParser", "clean_condition", "clean_script", "is_top_level_timer_start", "message_name",
           "signal_name"]


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


class BatonStartEventParser(EventMixin, SpiffStartEventParser):
    # SpiffWorkflow's start event parser does not read error and escalation definitions: such a
    # start event would become a none start event and its event subprocess would run at once.
    DEFINITIONS = [MESSAGE_EVENT_XPATH, SIGNAL_EVENT_XPATH, TIMER_EVENT_XPATH, ERROR_EVENT_XPATH,
                   ESCALATION_EVENT_XPATH]

    def create_task(self):
        if is_top_level_timer_start(self.node):
            definition = NoneEventDefinition(description="Default")
        else:
            definition = self.get_event_definition(self.DEFINITIONS)
        self.spec_class = event_subprocess_start_class(self.node) or self.spec_class
        task = self._create_task(definition)
        self.spec.start.connect(task)
        return task

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and is_top_level_timer_start(self.node):
            timer = read_timer(self.node.find(f"{{{profile.BPMN_NS}}}timerEventDefinition"))
            extensions["timer"] = {"kind": "cron" if timer.cron else timer.kind, "expression": timer.expression}
        return extensions


class BatonEndEventParser(EventMixin, SpiffEndEventParser):
    # SpiffWorkflow's end event parser does not read signal definitions (a signal end event would
    # throw nothing).
    def create_task(self):
        definition = self.get_event_definition([MESSAGE_EVENT_XPATH, SIGNAL_EVENT_XPATH, CANCEL_EVENT_XPATH,
                                                ERROR_EVENT_XPATH, ESCALATION_EVENT_XPATH, TERMINATION_EVENT_XPATH])
        task = self._create_task(definition)
        task.connect(self.spec.end)
        return task


class BatonIntermediateCatchEventParser(EventMixin, SpiffIntermediateCatchEventParser):
    pass


class BatonIntermediateThrowEventParser(EventMixin, SpiffIntermediateThrowEventParser):
    pass


class BatonBoundaryEventParser(EventMixin, SpiffBoundaryEventParser):
    pass


class BatonReceiveTaskParser(EventMixin, SpiffReceiveTaskParser):
    pass


class BatonEventBasedGatewayParser(ProfileMixin, EventBasedGatewayParser):
    pass


class BatonSubWorkflowParser(ProfileMixin, SubWorkflowParser):
    def create_task(self):
        # Spiff looks for a namespaced triggeredByEvent attribute, which modelers never write.
        if self.node.get("triggeredByEvent") == "true":
            self.spec_class = self.EVENT_SUBPROCESS_CLASS
        return super().create_task()


class BatonCallActivityParser(ProfileMixin, CallActivityParser):
    pass


class BatonConditionalGatewayParser(ProfileMixin, ConditionalGatewayParser):
    def parse_condition(self, sequence_flow):
        return clean_condition(super().parse_condition(sequence_flow))


class BatonGatewayParser(ProfileMixin, GatewayParser):
    pass


class BatonProcessParser(SpiffProcessParser):
    """A process or subprocess: its end is a ``ScopeEndJoin`` and its event subprocesses are
    connected from its start (``bpmn.scopes`` says why)."""

    def create_spec(self):
        spec = super().create_spec()
        spec.end.__class__ = ScopeEndJoin  # adds behaviour only, no state: created by Spiff's spec
        return spec

    def add_tasks(self):
        # SpiffWorkflow's add_tasks, except the last loop (connect_or_add_trigger).
        start_nodes = self.xpath("./bpmn:startEvent")
        if not start_nodes and self.process_executable:
            self.raise_validation_exception("No start event found")
        for node in start_nodes:
            self.parse_node(node)
        if len(start_nodes) > 1:
            split = StartEventSplit(self.spec, "StartEventSplit")
            join = StartEventJoin(self.spec, "StartEventJoin", split_task="StartEventSplit", threshold=1, cancel=True)
            for spec in self.spec.start.outputs:
                spec.inputs = [split]
                spec.connect(join)
            split.outputs = self.spec.start.outputs
            self.spec.start.outputs = [split]
            split.inputs = [self.spec.start]
        for node in self.xpath("./bpmn:subProcess[@triggeredByEvent='true']"):
            connect_event_subprocess(self.spec, self.parse_node(node))


class BatonBpmnParser(SpiffBpmnParser):
    """SpiffBpmnParser with Baton's profile; validation (``bpmn.checks``) runs before it."""

    PROCESS_PARSER_CLASS = BatonProcessParser

    def __init__(self, decisions: dict | None = None, correlations: dict | None = None):
        super().__init__()
        self.decisions = decisions or {}  # DMN decisions of the deploy, by id (bpmn.dmn.reader)
        self.correlations = correlations or {}  # per message name: {property: expression} (bpmn.correlations)

    def get_subprocess_specs(self, name, specs=None, require_call_activity_specs=True):
        """SpiffWorkflow's, passing ``require_call_activity_specs`` down when it recurses (3.2 drops
        it, so a callActivity inside an embedded subProcess was refused although deployed)."""
        used = specs if specs is not None else {}
        for task_spec in self.get_spec(name).task_specs.values():
            if isinstance(task_spec, SubWorkflowTaskMixin) and task_spec.spec not in used:
                subprocess_spec = self.get_spec(task_spec.spec, required=require_call_activity_specs)
                used[task_spec.spec] = subprocess_spec
                if subprocess_spec is not None:
                    self.get_subprocess_specs(task_spec.spec, used, require_call_activity_specs)
        return used

    # A copy: the parent's dict is shared by every SpiffBpmnParser in the process.
    OVERRIDE_PARSER_CLASSES = {
        **SpiffBpmnParser.OVERRIDE_PARSER_CLASSES,
        full_tag("task"): (TaskParser, NoneTask),
        full_tag("userTask"): (BatonUserTaskParser, UserTask),
        full_tag("manualTask"): (HumanTaskParser, ManualTask),
        full_tag("scriptTask"): (BatonScriptTaskParser, ScriptTask),
        full_tag("serviceTask"): (OperatorTaskParser, OperatorTask),
        full_tag("startEvent"): (BatonStartEventParser, StartEvent),
        full_tag("endEvent"): (BatonEndEventParser, EndEvent),
        full_tag("intermediateCatchEvent"): (BatonIntermediateCatchEventParser, IntermediateCatchEvent),
        full_tag("intermediateThrowEvent"): (BatonIntermediateThrowEventParser, IntermediateThrowEvent),
        full_tag("boundaryEvent"): (BatonBoundaryEventParser, BoundaryEvent),
        full_tag("receiveTask"): (BatonReceiveTaskParser, ReceiveTask),
        full_tag("sendTask"): (BatonSendTaskParser, SendTask),
        full_tag("businessRuleTask"): (BusinessRuleTaskParser, DecisionTask),
        full_tag("eventBasedGateway"): (BatonEventBasedGatewayParser, EventBasedGateway),
        full_tag("subProcess"): (BatonSubWorkflowParser, SubWorkflowTask),
        full_tag("callActivity"): (BatonCallActivityParser, CallActivity),
        full_tag("exclusiveGateway"): (BatonConditionalGatewayParser, ExclusiveGateway),
        full_tag("inclusiveGateway"): (BatonConditionalGatewayParser, InclusiveGateway),
        full_tag("parallelGateway"): (BatonGatewayParser, ParallelGateway),
    }
