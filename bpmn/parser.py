"""Baton's SpiffWorkflow parser: Spiff's own, reading Baton's profile into ``task_spec.extensions``.

One parser class per BPMN element Baton reads differently, built on three mixins: ``ProfileMixin``
puts the profile's properties into ``task_spec.extensions``, ``HumanTaskMixin`` adds forms and
buttons, ``EventMixin`` reads messages, signals, timers, errors and escalations. The readings of
the model they rest on (``message_name``, ``clean_script``, ...) are also what validation and the
deploy summary read, so that both see the model as the parser does.

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

import textwrap

from lxml import etree
from SpiffWorkflow.bpmn.parser.event_parsers import (
    CANCEL_EVENT_XPATH, ERROR_EVENT_XPATH, ESCALATION_EVENT_XPATH, MESSAGE_EVENT_XPATH, SIGNAL_EVENT_XPATH,
    TERMINATION_EVENT_XPATH, TIMER_EVENT_XPATH, EventBasedGatewayParser)
from SpiffWorkflow.bpmn.parser.task_parsers import ConditionalGatewayParser, GatewayParser
from SpiffWorkflow.bpmn.parser.util import full_tag
from SpiffWorkflow.bpmn.specs.defaults import (
    BoundaryEvent, EndEvent, EventBasedGateway, ExclusiveGateway, InclusiveGateway,
    IntermediateCatchEvent, IntermediateThrowEvent, ParallelGateway, StartEvent)
from SpiffWorkflow.bpmn.specs.event_definitions.multiple import MultipleEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.simple import NoneEventDefinition
from SpiffWorkflow.bpmn.specs.event_definitions.timer import (
    CycleTimerEventDefinition, DurationTimerEventDefinition, TimeDateEventDefinition)
from SpiffWorkflow.bpmn.specs.control import StartEventJoin, StartEventSplit
from SpiffWorkflow.bpmn.specs.mixins.subworkflow_task import SubWorkflowTask as SubWorkflowTaskMixin
from SpiffWorkflow.spiff.parser.event_parsers import (
    SpiffBoundaryEventParser, SpiffEndEventParser, SpiffIntermediateCatchEventParser,
    SpiffIntermediateThrowEventParser, SpiffReceiveTaskParser, SpiffSendTaskParser, SpiffStartEventParser)
from SpiffWorkflow.spiff.parser.process import SpiffBpmnParser, SpiffProcessParser
from SpiffWorkflow.spiff.parser.task_spec import (
    CallActivityParser, ScriptTaskParser, SpiffTaskParser, SubWorkflowParser, UserTaskParser)
from SpiffWorkflow.spiff.specs.defaults import (
    CallActivity, ManualTask, NoneTask, ReceiveTask, ScriptTask, SendTask, SubWorkflowTask, TransactionSubprocess,
    UserTask)

from bpmn import profile
from bpmn.assignment import read_assignment
from bpmn.camunda_forms import form_ref
from bpmn.camunda_io import MAPPED, io_mapping_of, read_io_mapping
from bpmn.cron import CronCycleDefinition
from bpmn.dmn.task import DecisionTask, decision_config, decision_ref
from bpmn.events import (ConditionDefinition, EscalationDefinition, ErrorDefinition, MessageDefinition,
                         MultipleDefinition, SignalDefinition)
from bpmn.expressions import translate
from bpmn.external import ExternalTask, event_topic_of, message_implementation, topic_of
from bpmn.io_mapping import MappedScriptTask
from bpmn.loops import ParallelInstances, SequentialInstances
from bpmn.operators import OperatorTask
from bpmn.scopes import EventSubprocessStart, InterruptingStartEvent, ScopeEndJoin, connect_event_subprocess
from bpmn.timers import read_timer

_TIMER_CLASSES = {"timeDate": TimeDateEventDefinition, "timeDuration": DurationTimerEventDefinition,
                  "timeCycle": CycleTimerEventDefinition}


# --- the mixins every parser below is built on -----------------------------------------------------

class ProfileMixin:
    """Adds ``extensions['properties']`` from Camunda and SpiffArena properties alike."""

    PARALLEL_MI_CLASS = ParallelInstances
    SEQUENTIAL_MI_CLASS = SequentialInstances

    def parse_extensions(self, node=None):
        node = self.node if node is None else node
        extensions = super().parse_extensions(node)
        extensions["properties"] = profile.read_properties(node)
        mapping = io_mapping_of(node) if etree.QName(node).localname in MAPPED else None
        if mapping is not None:  # camunda:inputOutput: bpmn.io_mapping applies it
            extensions["io"] = read_io_mapping(mapping).as_extension()
        return extensions


class HumanTaskMixin(ProfileMixin):
    """User and manual tasks also carry the form fields and buttons ``task.list`` shows, who the
    task is for and when it is due (``bpmn.assignment``), and the Camunda Form it names."""

    def parse_extensions(self, node=None):
        node = self.node if node is None else node
        extensions = super().parse_extensions(node)
        extensions["form"] = profile.read_form(node)
        extensions["buttons"] = profile.read_buttons(extensions["properties"])
        assignment, _problems = read_assignment(node)  # the problems were refused by bpmn.checks
        if assignment:
            extensions["assignment"] = assignment
        ref = form_ref(node)
        if ref is not None:
            extensions["form_ref"] = ref
        return extensions


class EventMixin(ProfileMixin):
    """Messages and signals by name (else id); timers as normalized expressions; errors and
    escalations that carry the thrower's variables (``bpmn.events``)."""

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None:  # the element itself: the correlation of the message it throws or waits for
            name = message_name(self.node)
            if name is None:
                definition = self.node.find(f"{{{profile.BPMN_NS}}}messageEventDefinition")
                name = message_name(definition) if definition is not None else None
            correlation = self.process_parser.parser.correlations.get(name) if name else None
            if correlation:
                extensions["correlation"] = dict(correlation)
        return extensions

    def parse_signal_event(self, signal_event):
        return SignalDefinition(signal_name(signal_event), description=self.get_event_description(signal_event))

    def parse_error_event(self, error_event):
        return _retyped(super().parse_error_event(error_event), ErrorDefinition)

    def parse_escalation_event(self, escalation_event):
        return _retyped(super().parse_escalation_event(escalation_event), EscalationDefinition)

    def parse_message_event(self, message_event):
        name = message_name(message_event)
        _payload, variable = self.parse_message_extensions(message_event)
        return MessageDefinition(name, message_var=variable,
                                 description=self.get_event_description(message_event))

    def parse_conditional_event(self, event):
        condition = event.find(f"{{{profile.BPMN_NS}}}condition")
        return ConditionDefinition(translate(clean_condition(condition.text)).python,
                                   description=self.get_event_description(event))

    def get_event_definition(self, xpaths):
        # Several definitions on one event: Baton's class, which merges what each event carried.
        definition = super().get_event_definition(xpaths)
        if type(definition) is MultipleEventDefinition:
            return MultipleDefinition(definition.event_definitions, definition.parallel,
                                      description=definition.description)
        return definition

    def parse_timer_event(self, event):
        timer = read_timer(event)
        name = self.node.get("name", self.node.get("id"))
        cls = CronCycleDefinition if timer.cron else _TIMER_CLASSES[timer.kind]
        return cls(name, timer.expression, description=self.get_event_description(event))


def _retyped(definition, cls):
    return cls(definition.name, expression=definition.expression, variable=definition.variable,
               code=definition.code, description=definition.description)


# --- readings of the model (validation and the deploy summary read them too) ------------------------

def clean_script(text: str | None) -> str | None:
    """A script body as written in XML, indented with the markup: dedented, so Python accepts it."""
    if text is None:
        return None
    return textwrap.dedent(text).strip("\n") or None


def clean_condition(text: str | None) -> str | None:
    return (text.strip() or None) if text is not None else None


def message_name(element: etree._Element) -> str | None:
    """The name ``process.message`` uses for the message an element refers to by ``messageRef``."""
    ref = element.get("messageRef")
    if not ref:
        return None
    for message in element.getroottree().getroot().iterchildren(f"{{{profile.BPMN_NS}}}message"):
        if message.get("id") == ref:
            return (message.get("name") or "").strip() or ref
    return None


def signal_name(element: etree._Element) -> str | None:
    """The name a signal is broadcast by: its ``bpmn:signal``'s ``name``, else that signal's id."""
    ref = element.get("signalRef")
    if not ref:
        return None
    for signal in element.getroottree().getroot().iterchildren(f"{{{profile.BPMN_NS}}}signal"):
        if signal.get("id") == ref:
            return (signal.get("name") or "").strip() or ref
    return None


def is_top_level_timer_start(node: etree._Element) -> bool:
    return (etree.QName(node).localname == "startEvent"
            and etree.QName(node.getparent()).localname == "process"
            and node.find(f"{{{profile.BPMN_NS}}}timerEventDefinition") is not None)


def event_subprocess_start_class(node: etree._Element):
    """The spec class of an event subprocess's start event, or None for other start events."""
    parent = node.getparent()
    if etree.QName(parent).localname != "subProcess" or parent.get("triggeredByEvent") != "true":
        return None
    return EventSubprocessStart if node.get("isInterrupting") == "false" else InterruptingStartEvent


# --- the parsers -------------------------------------------------------------------------------------

class TaskParser(ProfileMixin, SpiffTaskParser):
    pass


class HumanTaskParser(HumanTaskMixin, SpiffTaskParser):
    pass


class BatonUserTaskParser(HumanTaskMixin, UserTaskParser):
    pass


def with_spiff_scripts(parser, task):
    """``task`` with the element's SpiffArena preScript and postScript (run in the sandbox when the
    task becomes ready and when it completes), for the parsers that build their task themselves."""
    extensions = SpiffTaskParser.parse_extensions(parser)
    task.prescript = clean_script(extensions.get("preScript"))
    task.postscript = clean_script(extensions.get("postScript"))
    return task


class BatonScriptTaskParser(ProfileMixin, ScriptTaskParser):
    def create_task(self):
        script = None
        for child in self.node:
            if isinstance(child.tag, str) and child.tag == full_tag("script"):
                script = clean_script(child.text)
        spec_class = MappedScriptTask if io_mapping_of(self.node) is not None else self.spec_class
        return with_spiff_scripts(self, spec_class(self.spec, self.bpmn_id, script, **self.bpmn_attributes))


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


class ImplementedMessageMixin:
    """A message end or throw event with a Camunda implementation is an external task
    (``bpmn.external.message_implementation``): a worker does the sending."""

    def implemented_task(self):
        if message_implementation(self.node) is None:
            return None
        return with_spiff_scripts(self, ExternalTask(self.spec, self.bpmn_id, operation_name=event_topic_of(self.node)["topic"],
                                                     operation_params={}, result_variable=None, **self.bpmn_attributes))

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and message_implementation(self.node) is not None:
            extensions["external"] = event_topic_of(self.node)
        return extensions


class BatonEndEventParser(ImplementedMessageMixin, EventMixin, SpiffEndEventParser):
    # SpiffWorkflow's end event parser does not read signal definitions (a signal end event would
    # throw nothing).
    def create_task(self):
        task = self.implemented_task()
        if task is None:
            definition = self.get_event_definition([MESSAGE_EVENT_XPATH, SIGNAL_EVENT_XPATH, CANCEL_EVENT_XPATH,
                                                    ERROR_EVENT_XPATH, ESCALATION_EVENT_XPATH, TERMINATION_EVENT_XPATH])
            task = self._create_task(definition)
        task.connect(self.spec.end)
        return task


class BatonIntermediateCatchEventParser(EventMixin, SpiffIntermediateCatchEventParser):
    pass


class BatonIntermediateThrowEventParser(ImplementedMessageMixin, EventMixin, SpiffIntermediateThrowEventParser):
    def create_task(self):
        return self.implemented_task() or super().create_task()


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


# Tasks that hand work outside the flow: operator and external service tasks, send tasks, business rule
# tasks (their spec classes: ``bpmn.operators``, ``bpmn.external``, ``bpmn.dmn.task``).

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
        return with_spiff_scripts(self, self.spec_class(
            self.spec, self.bpmn_id,
            operation_name=properties.get("operator", ""),
            operation_params={},
            result_variable=properties.get("result_variable") or None,
            manual=True,
            **self.bpmn_attributes))

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and not extensions["properties"].get("operator"):
            extensions["external"] = topic_of(self.node)
        else:
            extensions["operator"] = extensions["properties"].get("operator", "")
        return extensions


def create_external_task(parser) -> ExternalTask:
    return with_spiff_scripts(parser, ExternalTask(parser.spec, parser.bpmn_id, operation_name=topic_of(parser.node)["topic"],
                                                   operation_params={}, result_variable=None, **parser.bpmn_attributes))


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
        return with_spiff_scripts(self, DecisionTask(self.spec, self.bpmn_id, **self.bpmn_attributes))

    def parse_extensions(self, node=None):
        extensions = super().parse_extensions(node)
        if node is None and decision_ref(self.node) is None:
            extensions["external"] = topic_of(self.node)
        elif node is None:
            extensions["decision"] = decision_config(self.node, self.process_parser.parser.decisions)
        return extensions


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
        full_tag("transaction"): (BatonSubWorkflowParser, TransactionSubprocess),
        full_tag("callActivity"): (BatonCallActivityParser, CallActivity),
        full_tag("exclusiveGateway"): (BatonConditionalGatewayParser, ExclusiveGateway),
        full_tag("inclusiveGateway"): (BatonConditionalGatewayParser, InclusiveGateway),
        full_tag("parallelGateway"): (BatonGatewayParser, ParallelGateway),
    }
