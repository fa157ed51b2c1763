"""What a deployed process offers the engine besides its specs: how it starts, what it waits for,
what it throws, which workers it needs.
"""
from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from bpmn import profile
from bpmn.checks.elements import bpmn_children, containers, content, event_definition
from bpmn.checks.process import start_trigger
from bpmn.issues import local_name
from bpmn.parser import is_top_level_timer_start, message_name
from bpmn.timers import read_timer


@dataclass(frozen=True)
class StartEventInfo:
    element_id: str
    # webhook, a channel type, 'timer' (a top-level timer start), 'message', 'signal', 'multiple'
    # (several message and signal definitions) or None (process.start)
    trigger: str | None
    channel: str | None
    line: int | None = None
    message: str | None = None  # the message name of a message start event
    signal: str | None = None   # the signal name of a signal start event
    messages: tuple[str, ...] = ()  # a multiple start event's messages and signals; parallel: all of
    signals: tuple[str, ...] = ()   # them must occur (BPMN's parallel multiple), else any one
    parallel: bool = False


@dataclass(frozen=True)
class TimerStartInfo:
    """A top-level timer start event: the engine creates an instance when it is due.

    ``expression`` is always a quoted literal (``"R3/PT10M"``, ``"PT5M"``, ``"2026-12-01T10:00:00Z"``,
    or a Quartz cron such as ``"0 0 9 * * ?"`` when ``kind`` is ``cron``; ``ast.literal_eval`` gives
    the text): deploy refuses computed ones, as no variable exists before the instance. An ISO
    timeCycle has 1 to 1000 repetitions; a cron repeats for as long as the definition is the latest.
    """
    element_id: str
    kind: str  # timeDate | timeDuration | timeCycle | cron
    expression: str
    line: int | None = None


def start_events_of(process: etree._Element) -> list[StartEventInfo]:
    events = []
    for element in bpmn_children(process):
        if local_name(element) == "startEvent":
            properties = profile.read_properties(element)
            trigger = start_trigger(element)
            parts = trigger[1] if trigger[0] == "multiple" else ()
            events.append(StartEventInfo(
                element_id=element.get("id"),
                trigger=trigger[0] if trigger[0] in ("timer", "message", "signal", "multiple")
                else properties.get("trigger") or None,
                channel=(properties.get("channel") or "").strip() or None,
                line=element.sourceline,
                message=trigger[1] if trigger[0] == "message" else None,
                signal=trigger[1] if trigger[0] == "signal" else None,
                messages=tuple(name for kind, name in parts if kind == "message"),
                signals=tuple(name for kind, name in parts if kind == "signal"),
                parallel=trigger[0] == "multiple" and trigger[2],
            ))
    return events


def default_start(starts: list[StartEventInfo]) -> str | None:
    """The start event ``process.start`` begins at: the one without a trigger, else the first that
    waits for nothing (webhook, channel and timer starts run at once), else the first."""
    for start in starts:
        if start.trigger is None:
            return start.element_id
    for start in starts:
        if start.trigger not in ("message", "signal", "multiple"):
            return start.element_id
    return starts[0].element_id if starts else None


def timer_starts_of(process: etree._Element) -> list[TimerStartInfo]:
    starts = []
    for element in bpmn_children(process):
        if local_name(element) == "startEvent" and is_top_level_timer_start(element):
            timer = read_timer(event_definition(element))
            kind = "cron" if timer.cron else timer.kind
            starts.append(TimerStartInfo(element.get("id"), kind, timer.expression, element.sourceline))
    return starts


def messages_of(process: etree._Element) -> list[str]:
    """Names of the messages the process waits for anywhere (catch and start events, boundary
    events, receive tasks), in file order, once each."""
    names = []
    for container in containers(process):
        for element in content(container):
            definition = event_definition(element)
            if local_name(element) == "receiveTask":
                names.append(message_name(element))
            elif definition is not None and local_name(definition) == "messageEventDefinition" \
                    and local_name(element) not in ("endEvent", "intermediateThrowEvent"):
                names.append(message_name(definition))
    return list(dict.fromkeys(name for name in names if name))


def throws_of(process: etree._Element) -> list[str]:
    """Names of the messages the process throws (message end and throw events, send tasks)."""
    names = []
    for container in containers(process):
        for element in content(container):
            definition = event_definition(element)
            if local_name(element) == "sendTask" and element.get("messageRef"):
                names.append(message_name(element))
            elif definition is not None and local_name(definition) == "messageEventDefinition" \
                    and local_name(element) in ("endEvent", "intermediateThrowEvent"):
                names.append(message_name(definition))
    return list(dict.fromkeys(name for name in names if name))
