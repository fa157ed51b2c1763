"""From an uploaded BPMN file to a deployable definition, or a refusal listing every problem.

Order: hardened XML reading (file-level refusals stop here), Baton's own checks (allowlist,
flows, events, loops, calls, profile properties, code; per process and subprocess), then, for a
file they pass, SpiffWorkflow's parser on the chosen process, whose complaints are translated
into the same ``{element_id, line, message}`` entries. Nothing is executed and nothing is fetched.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.exceptions import SpiffWorkflowException

from bpmn import checks, profile
from bpmn.allowlist import STRIPPED_BEFORE_SPIFF
from bpmn.checks.elements import bpmn_children, containers, content, event_definition
from bpmn.checks.loops import camunda, collection_variable
from bpmn.expressions import translate
from bpmn.hardened_xml import read_bpmn_xml
from bpmn.issues import Issues, local_name
from bpmn.parser import BatonBpmnParser, is_top_level_timer_start, message_name
from bpmn.timers import read_timer
from bpmn.serializer import spec_to_json
from engine.errors import BpmnValidationError


@dataclass(frozen=True)
class StartEventInfo:
    element_id: str
    trigger: str | None  # webhook, a channel type, 'timer' (a top-level timer start) or None
    channel: str | None
    line: int | None = None


@dataclass(frozen=True)
class TimerStartInfo:
    """A top-level timer start event: the engine creates an instance when it is due.

    ``expression`` is always a quoted ISO 8601 literal (``"R3/PT10M"``, ``"PT5M"``,
    ``"2026-12-01T10:00:00Z"``; ``ast.literal_eval`` gives the text): deploy refuses computed ones,
    as no variable exists before the instance. A timeCycle has 1 to 1000 repetitions.
    """
    element_id: str
    kind: str  # timeDate | timeDuration | timeCycle
    expression: str
    line: int | None = None


@dataclass
class ParsedDefinition:
    process_id: str
    name: str | None
    spec: BpmnProcessSpec
    subprocess_specs: dict[str, BpmnProcessSpec]  # embedded subprocesses; not the called processes
    start_events: list[StartEventInfo]
    spec_json: str  # spec and subprocess specs, stored once per definition
    # callActivity calledElement values: codes of other definitions of the same tenant. Their
    # specs are not in subprocess_specs: the engine adds each (latest version) under this name.
    called_elements: list[str] = field(default_factory=list)
    timer_starts: list[TimerStartInfo] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # names the process can catch (process.message)


def parse_definition(xml: str | bytes) -> ParsedDefinition:
    """The deployable definition of ``xml``; raises BpmnValidationError listing every problem."""
    tree = read_bpmn_xml(xml)
    issues = Issues(tree)
    process, specs = None, None
    try:
        process = _check(tree.getroot(), issues)
        # SpiffWorkflow only sees files Baton's checks pass: its complaints about a file with
        # problems are mostly echoes of them, in words that mislead ("perhaps a form has the
        # same ID?"); anything only it finds is reported once the file is otherwise clean.
        if process is not None and not issues:
            specs = _spiff_parse(tree.getroot(), process, issues)
    except BpmnValidationError:
        raise
    except Exception as exc:  # a bug of ours or Spiff's must not escape as a 500 of deploy
        issues.add_internal_error(exc)
    issues.raise_if_any()
    if process is None or specs is None:  # every path that yields None has added an issue
        issues.add_internal_error(RuntimeError("BPMN checks produced neither specs nor issues"))
        issues.raise_if_any()
    spec, subprocess_specs = specs
    return ParsedDefinition(
        process_id=process.get("id"),
        name=process.get("name") or None,
        spec=spec,
        subprocess_specs=subprocess_specs,
        start_events=start_events_of(process),
        spec_json=spec_to_json(spec, subprocess_specs),
        called_elements=checks.called_elements(process),
        timer_starts=timer_starts_of(process),
        messages=messages_of(process),
    )


def _check(root: etree._Element, issues: Issues) -> etree._Element | None:
    checks.check_definitions(root, issues)
    process, to_check = checks.select_process(root, issues)
    for candidate in to_check:
        checks.check_start_events(candidate, issues)
        for container in checks.containers(candidate):
            for check in checks.CONTAINER_CHECKS:
                check(container, issues)
    return process


def _spiff_parse(root: etree._Element, process: etree._Element, issues: Issues):
    """SpiffWorkflow's specs of ``process``, or None with its complaint added to ``issues``."""
    _strip_for_spiff(root)
    _spell_camunda_collections(root)
    _translate_expressions(root)
    parser = BatonBpmnParser()
    try:
        parser.add_bpmn_xml(root)
        spec = parser.get_spec(process.get("id"))
        # Called processes live in other definitions: Spiff leaves None for them, dropped here.
        subprocess_specs = {name: sub for name, sub in parser.get_subprocess_specs(
            process.get("id"), require_call_activity_specs=False).items() if sub is not None}
    except SpiffWorkflowException as exc:  # ValidationException and friends
        issues.add_spiff_error(exc)
        return None
    except Exception as exc:  # checks passed, so this is a gap in them (or a bug of Spiff's)
        issues.add_internal_error(exc)
        return None
    return spec, subprocess_specs


def _strip_for_spiff(root: etree._Element) -> None:
    doomed = [el for el in root.iter() if isinstance(el.tag, str)
              and etree.QName(el).namespace == profile.BPMN_NS and local_name(el) in STRIPPED_BEFORE_SPIFF]
    for element in doomed:
        element.getparent().remove(element)


def _spell_camunda_collections(root: etree._Element) -> None:
    """Camunda Modeler's multi-instance "Collection"/"Element variable" attributes, written as the
    loopDataInputRef/inputDataItem elements SpiffWorkflow reads (checks have validated them)."""
    bpmn = f"{{{profile.BPMN_NS}}}"
    for loop in root.iter(f"{bpmn}multiInstanceLoopCharacteristics"):
        collection = collection_variable((loop.get(camunda("collection")) or "").strip())
        if collection and loop.find(f"{bpmn}loopDataInputRef") is None:
            etree.SubElement(loop, f"{bpmn}loopDataInputRef").text = collection
        element_variable = (loop.get(camunda("elementVariable")) or "").strip()
        if element_variable and loop.find(f"{bpmn}inputDataItem") is None:
            etree.SubElement(loop, f"{bpmn}inputDataItem", id=element_variable)


# Elements whose text is a condition or expression SpiffWorkflow evaluates (timers are read by
# bpmn.timers): a JUEL or FEEL text is replaced by its Python translation, which the checks accepted.
_EXPRESSION_TAGS = ("conditionExpression", "loopCondition", "completionCondition", "loopCardinality")


def _translate_expressions(root: etree._Element) -> None:
    for tag in _EXPRESSION_TAGS:
        for node in root.iter(f"{{{profile.BPMN_NS}}}{tag}"):
            translation = translate(node.text or "")
            if translation.dialect is not None and translation.python is not None:
                node.text = translation.python
                node.attrib.pop("language", None)
    for tag in ("loopDataInputRef", "loopDataOutputRef"):
        for node in root.iter(f"{{{profile.BPMN_NS}}}{tag}"):
            node.text = collection_variable((node.text or "").strip()) or node.text


def start_events_of(process: etree._Element) -> list[StartEventInfo]:
    events = []
    for element in bpmn_children(process):
        if local_name(element) == "startEvent":
            properties = profile.read_properties(element)
            timer = is_top_level_timer_start(element)
            events.append(StartEventInfo(
                element_id=element.get("id"),
                trigger="timer" if timer else properties.get("trigger") or None,
                channel=(properties.get("channel") or "").strip() or None,
                line=element.sourceline,
            ))
    return events


def timer_starts_of(process: etree._Element) -> list[TimerStartInfo]:
    starts = []
    for element in bpmn_children(process):
        if local_name(element) == "startEvent" and is_top_level_timer_start(element):
            timer = read_timer(event_definition(element))
            starts.append(TimerStartInfo(element.get("id"), timer.kind, timer.expression, element.sourceline))
    return starts


def messages_of(process: etree._Element) -> list[str]:
    """Names of the messages the process waits for anywhere (catch and start events of event
    subprocesses, boundary events, receive tasks), in file order, once each."""
    names = []
    for container in containers(process):
        for element in content(container):
            definition = event_definition(element)
            if local_name(element) == "receiveTask":
                names.append(message_name(element))
            elif definition is not None and local_name(definition) == "messageEventDefinition" \
                    and local_name(element) != "endEvent":
                names.append(message_name(definition))
    return list(dict.fromkeys(name for name in names if name))
