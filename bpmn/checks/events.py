"""Events where they may run: start events per kind of container, boundary events, catch events,
event-based gateways, receive tasks, and the messages, errors and escalations they refer to.

``bpmn.checks.elements`` has already refused event definitions an element may never carry; these
checks know the places (a message start event only opens an event subprocess) and the references.
"""
from __future__ import annotations

from lxml import etree

from bpmn import profile
from bpmn.allowlist import FLOW_ELEMENTS
from bpmn.checks.elements import (bpmn_children, container_word, content, event_definition, is_container,
                                  is_event_subprocess, is_multiple)
from bpmn.checks.flows import flow_index
from bpmn.dmn.task import decision_ref, is_implemented_like_a_service
from bpmn.issues import Issues, local_name
from bpmn.timers import read_timer

ACTIVITIES = frozenset({"task", "scriptTask", "userTask", "manualTask", "serviceTask", "receiveTask",
                        "callActivity", "subProcess", "sendTask", "businessRuleTask", "transaction",
                        "adHocSubProcess"})
_SUBPROCESS_LIKE = ("subProcess", "callActivity", "transaction")
_HUMAN = ("userTask", "manualTask")  # task.bpmn_error and task.bpmn_escalation throw at them
_EVENT_SUBPROCESS_STARTS = ("timerEventDefinition", "messageEventDefinition", "signalEventDefinition",
                            "errorEventDefinition", "escalationEventDefinition")
_OR_A_WORKER = {"error": ", what the worker of an external task reports, or task.bpmn_error at a user task",
                "escalation": ", or task.bpmn_escalation at a user task"}
_THROWERS = ("endEvent", "intermediateThrowEvent")
_PROCESS_STARTS = ("timerEventDefinition", "messageEventDefinition", "signalEventDefinition")
_UPSTREAM_TIMER_BUG = ("SpiffWorkflow 3.2 keeps one due time per gateway, so two timers after one "
                       "eventBasedGateway fire at the wrong time (an upstream bug)")
_REFERENCES = {"messageEventDefinition": ("messageRef", "message", True),
               "signalEventDefinition": ("signalRef", "signal", True),
               "errorEventDefinition": ("errorRef", "error", False),
               "escalationEventDefinition": ("escalationRef", "escalation", False)}


def check_events(container: etree._Element, issues: Issues) -> None:
    declared = _declarations(container.getroottree().getroot())
    _check_container_starts(container, issues)
    for element in content(container):
        tag = local_name(element)
        definition = event_definition(element)
        # Definitions refused where they stand (an error start event of the process) already have
        # their sentence; their references and timers are not looked at.
        if definition is not None and local_name(definition) in FLOW_ELEMENTS.get(tag, ()) \
                and not (tag == "startEvent" and not is_container(container)
                         and local_name(definition) not in _PROCESS_STARTS):
            _check_reference(element, definition, declared, issues)
            if local_name(definition) == "timerEventDefinition":
                _check_timer(element, definition, container, issues)
        if is_multiple(element):
            for part in bpmn_children(element):
                if local_name(part).endswith("EventDefinition"):
                    _check_reference(element, part, declared, issues)
                if local_name(part) == "timerEventDefinition":
                    _check_timer(element, part, container, issues)
        if tag == "endEvent" and definition is not None and local_name(definition) == "cancelEventDefinition" \
                and local_name(container) != "transaction":
            issues.add(element, f"A cancel endEvent cancels the transaction it is in; this one is in a "
                                f"{container_word(container)}.")
        if tag == "startEvent":
            _check_start_event(element, definition, container, issues)
        elif tag == "intermediateCatchEvent" and definition is None and not _has_definitions(element):
            issues.add(element, "intermediateCatchEvent needs a timer, message, signal or conditional definition: "
                                "it waits for something.")
        elif tag == "boundaryEvent":
            _check_boundary_event(element, definition, container, issues)
        elif tag == "receiveTask":
            _check_receive_task(element, declared, issues)
        elif tag == "eventBasedGateway":
            _check_event_based_gateway(element, container, issues)


def _declarations(root: etree._Element) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {"message": set(), "signal": set(), "error": set(), "escalation": set()}
    for child in bpmn_children(root):
        if local_name(child) in found and child.get("id"):
            found[local_name(child)].add(child.get("id"))
    return found


def _has_definitions(element) -> bool:
    return any(local_name(child).endswith("EventDefinition") or local_name(child) == "eventDefinitionRef"
               for child in bpmn_children(element))


def _check_reference(element, definition, declared, issues: Issues) -> None:
    rule = _REFERENCES.get(local_name(definition))
    if rule is None:
        return
    attribute, kind, required = rule
    ref = definition.get(attribute)
    tag = local_name(element)
    if not ref:
        if required:
            what = "throws" if tag in _THROWERS else "waits for"
            issues.add(element, f"{tag} {local_name(definition)} needs a {attribute} naming a bpmn:{kind} "
                                f"(its name is what the event {what}).", at=definition)
    elif ref not in declared[kind]:
        issues.add(element, f"{tag} {attribute} '{ref}' names no bpmn:{kind} of this file.", at=definition)


def _check_container_starts(container, issues: Issues) -> None:
    if not is_container(container):
        return  # the process: bpmn.checks.process requires a start event
    word = container_word(container)
    article = "An" if word.startswith("event") else "A"
    starts = [child for child in content(container) if local_name(child) == "startEvent"]
    if len(starts) != 1:
        issues.add(container, f"{article} {word} needs exactly one start event; this one has {len(starts)}.")
    if not any(local_name(child) == "endEvent" for child in content(container)):
        issues.add(container, f"{article} {word} needs an end event.")


def _check_start_event(element, definition, container, issues: Issues) -> None:
    kind = local_name(definition) if definition is not None else None
    trigger = profile.read_properties(element).get("trigger")
    if not is_container(container):  # the process
        if is_multiple(element) and trigger:
            issues.add(element, f"A multiple start event starts the process by its messages and signals; remove "
                                f"its 'trigger' property ({trigger}).")
        if kind in ("errorEventDefinition", "escalationEventDefinition"):
            issues.add(element, f"A start event with {kind} can only start an event subProcess "
                                '(a subProcess with triggeredByEvent="true").')
        elif kind in _PROCESS_STARTS and trigger:
            what = kind.removesuffix("EventDefinition")
            issues.add(element, f"A {what} start event starts the process by its {what}; remove its "
                                f"'trigger' property ({trigger}).")
        return
    if trigger:
        issues.add(element, f"The 'trigger' property only applies to a start event of the process, "
                            f"not of a {container_word(container)}.")
    if is_event_subprocess(container):
        if kind not in _EVENT_SUBPROCESS_STARTS:
            issues.add(element, "An event subProcess starts at a timer, message, signal, error or "
                                "escalation start event; this start event waits for nothing.")
        elif kind == "errorEventDefinition" and element.get("isInterrupting") == "false":
            issues.add(element, "An error start event always interrupts its scope; remove "
                                'isInterrupting="false".')
        elif kind != "timerEventDefinition" and is_container(container.getparent()):
            issues.add(element, f"An event subProcess started by {kind} must sit directly in the "
                                "process, not inside a subProcess (not supported yet).")
    elif kind is not None:
        issues.add(element, f"A subProcess starts at a none start event; {kind} is for event "
                            'subProcesses (triggeredByEvent="true").')


def _check_timer(element, definition, container, issues: Issues) -> None:
    timer = read_timer(definition)
    tag = local_name(element)
    if timer.problem:
        issues.add(element, f"{tag} {timer.problem}", at=timer.element if timer.element is not None else definition)
        return
    if tag == "startEvent" and not is_container(container) and timer.literal is None:
        issues.add(element, f"A timer start event of the process needs a literal {timer.kind} such as "
                            "PT5M or 2026-12-01T10:00:00Z: it is computed before any variable exists.",
                   at=timer.element)
    if timer.kind != "timeCycle":
        return
    interrupting = element.get("cancelActivity" if tag == "boundaryEvent" else "isInterrupting") != "false"
    if tag == "startEvent" and is_event_subprocess(container) and interrupting:
        issues.add(element, "A timeCycle repeats, but an interrupting event subProcess starts once; use "
                            'timeDuration or timeDate, or set isInterrupting="false".', at=timer.element)
    elif tag == "intermediateCatchEvent" or (tag == "boundaryEvent" and interrupting):
        where = "an interrupting boundaryEvent" if tag == "boundaryEvent" else f"an {tag}"
        issues.add(element, f"A timeCycle repeats, which {where} cannot; use timeDuration or timeDate, "
                            "or a non-interrupting boundaryEvent.", at=timer.element)


def _check_boundary_event(element, definition, container, issues: Issues) -> None:
    attached = element.get("attachedToRef")
    activities = {child.get("id"): child for child in content(container)
                  if local_name(child) in ACTIVITIES and child.get("id")}
    target = activities.get(attached) if attached else None
    if not attached:
        issues.add(element, "boundaryEvent has no attachedToRef.")
    elif target is None:
        issues.add(element, f"boundaryEvent attachedToRef '{attached}' is not an activity of this "
                            f"{container_word(container)}.")
    elif is_event_subprocess(target):
        issues.add(element, f"boundaryEvent is attached to event subProcess '{attached}', which has no "
                            "boundary; attach it to an activity of the flow.")
    cancel = element.get("cancelActivity", "true")
    if cancel not in ("true", "false"):
        issues.add(element, f"boundaryEvent cancelActivity must be true or false, not '{cancel}'.")
    if definition is None:
        if not _has_definitions(element):
            issues.add(element, "boundaryEvent needs a timer, message, signal, error, escalation, conditional or "
                                "cancel definition.")
        return
    kind = local_name(definition)
    if kind in ("errorEventDefinition", "cancelEventDefinition") and cancel == "false":
        what = "An error" if kind == "errorEventDefinition" else "A cancel"
        issues.add(element, f'{what} boundaryEvent always interrupts its activity; remove cancelActivity="false".')
    if kind == "cancelEventDefinition" and target is not None and local_name(target) != "transaction":
        issues.add(element, f"A cancel boundaryEvent catches the cancel end event of a transaction; '{attached}' "
                            f"is a {local_name(target)}.")
    if kind in ("errorEventDefinition", "escalationEventDefinition") and target is not None \
            and local_name(target) not in _SUBPROCESS_LIKE + _HUMAN \
            and not (kind == "errorEventDefinition" and is_external_task(target)):
        what = "error" if kind == "errorEventDefinition" else "escalation"
        issues.add(element, f"An {what} boundaryEvent catches what an {what} end or throw event inside a "
                            f"subProcess or callActivity throws{_OR_A_WORKER[what]}; '{attached}' is a "
                            f"{local_name(target)}.")


def _check_receive_task(element, declared, issues: Issues) -> None:
    ref = element.get("messageRef")
    if not ref:
        issues.add(element, "receiveTask needs a messageRef naming a bpmn:message "
                            "(its name is what process.message delivers).")
    elif ref not in declared["message"]:
        issues.add(element, f"receiveTask messageRef '{ref}' names no bpmn:message of this file.")
    if element.get("instantiate") == "true":
        issues.add(element, 'A receiveTask cannot start the process (instantiate="true"); give a none '
                            "start event the property trigger = webhook.")


def _check_event_based_gateway(gateway, container, issues: Issues) -> None:
    if gateway.get("instantiate") == "true" or gateway.get("eventGatewayType", "Exclusive") != "Exclusive":
        issues.add(gateway, "Only an exclusive eventBasedGateway inside the flow is supported "
                            "(not instantiate or eventGatewayType Parallel).")
    outgoing, incoming = flow_index(container)
    nodes = {child.get("id"): child for child in content(container) if child.get("id")}
    outs = outgoing[gateway.get("id")]
    if len(outs) < 2:
        issues.add(gateway, "An eventBasedGateway needs at least two outgoing sequence flows, each to "
                            "the event it waits for.")
    timers = []
    for flow in outs:
        target = nodes.get(flow.get("targetRef"))
        if target is None:
            continue
        kind = local_name(target)
        definition = event_definition(target)
        if kind == "receiveTask" or (kind == "intermediateCatchEvent" and definition is not None):
            if len(incoming[target.get("id")]) > 1:
                issues.add(target, f"{kind} after eventBasedGateway '{gateway.get('id')}' can have no other "
                                   "incoming sequence flow.")
            if definition is not None and local_name(definition) == "timerEventDefinition":
                timers.append(target)
        else:
            issues.add(gateway, f"eventBasedGateway leads to {kind} '{target.get('id')}' (sequenceFlow "
                                f"'{flow.get('id')}'); it must lead to intermediateCatchEvents (timer or "
                                "message) or receiveTasks.", at=flow)
    for extra in timers[1:]:
        issues.add(extra, f"eventBasedGateway '{gateway.get('id')}' already waits for timer "
                          f"'{timers[0].get('id')}'; {_UPSTREAM_TIMER_BUG}. Use one timer.")


def is_external_task(element) -> bool:
    """A service task without an operator, a send task without a message, a business rule task
    implemented like a service: a worker completes it."""
    tag = local_name(element)
    if tag == "serviceTask":
        return not profile.read_properties(element).get("operator")
    if tag == "businessRuleTask":
        return decision_ref(element) is None and is_implemented_like_a_service(element)
    return tag == "sendTask" and not element.get("messageRef")
