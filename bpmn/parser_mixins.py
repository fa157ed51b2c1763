"""The mixins Baton's SpiffWorkflow parsers share, and the readings of the model they rest on.

``ProfileMixin`` puts the profile's properties into ``task_spec.extensions``; ``HumanTaskMixin``
adds forms and buttons; ``EventMixin`` reads messages and signals by name (a message's correlation
properties into ``extensions['correlation']``), timers as normalized expressions (``bpmn.timers``,
cron cycles by ``bpmn.cron``) and errors and escalations that carry the thrower's variables
(``bpmn.events``).
"""
from __future__ import annotations

import textwrap

from lxml import etree
from SpiffWorkflow.bpmn.specs.event_definitions.timer import (
    CycleTimerEventDefinition, DurationTimerEventDefinition, TimeDateEventDefinition)

from bpmn import profile
from bpmn.cron import CronCycleDefinition
from bpmn.events import EscalationDefinition, ErrorDefinition, MessageDefinition, SignalDefinition
from bpmn.loops import ParallelInstances, SequentialInstances
from bpmn.scopes import EventSubprocessStart, InterruptingStartEvent
from bpmn.timers import read_timer

_TIMER_CLASSES = {"timeDate": TimeDateEventDefinition, "timeDuration": DurationTimerEventDefinition,
                  "timeCycle": CycleTimerEventDefinition}


def clean_script(text: str | None) -> str | None:
    """A script body as written in XML, indented with the markup: dedented, so Python accepts it."""
    if text is None:
        return None
    return textwrap.dedent(text).strip("\n") or None


def clean_condition(text: str | None) -> str | None:
    return (text.strip() or None) if text is not None else None


class ProfileMixin:
    """Adds ``extensions['properties']`` from Camunda and SpiffArena properties alike."""

    PARALLEL_MI_CLASS = ParallelInstances
    SEQUENTIAL_MI_CLASS = SequentialInstances

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

    def parse_timer_event(self, event):
        timer = read_timer(event)
        name = self.node.get("name", self.node.get("id"))
        cls = CronCycleDefinition if timer.cron else _TIMER_CLASSES[timer.kind]
        return cls(name, timer.expression, description=self.get_event_description(event))


def _retyped(definition, cls):
    return cls(definition.name, expression=definition.expression, variable=definition.variable,
               code=definition.code, description=definition.description)


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
