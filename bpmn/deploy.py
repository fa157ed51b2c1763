"""From an uploaded BPMN file to a deployable definition, or a refusal listing every problem.

Order: hardened XML reading (file-level refusals stop here), Baton's own checks (allowlist,
flows, profile properties, code), then SpiffWorkflow's parser on the chosen process, whose
complaints are translated into the same ``{element_id, line, message}`` entries. Nothing is
executed and nothing is fetched.
"""
from __future__ import annotations

from dataclasses import dataclass

from lxml import etree
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.exceptions import SpiffWorkflowException

from bpmn import checks, profile
from bpmn.allowlist import STRIPPED_BEFORE_SPIFF
from bpmn.checks.elements import bpmn_children
from bpmn.hardened_xml import read_bpmn_xml
from bpmn.issues import Issues, local_name, log
from bpmn.parser import BatonBpmnParser
from bpmn.serializer import spec_to_json
from engine.errors import BpmnValidationError


@dataclass(frozen=True)
class StartEventInfo:
    element_id: str
    trigger: str | None
    channel: str | None
    line: int | None = None


@dataclass
class ParsedDefinition:
    process_id: str
    name: str | None
    spec: BpmnProcessSpec
    subprocess_specs: dict[str, BpmnProcessSpec]
    start_events: list[StartEventInfo]
    spec_json: str  # spec and subprocess specs, stored once per definition


def parse_definition(xml: str | bytes) -> ParsedDefinition:
    """The deployable definition of ``xml``; raises BpmnValidationError listing every problem."""
    tree = read_bpmn_xml(xml)
    issues = Issues(tree)
    process, specs = None, None
    try:
        process = _check(tree.getroot(), issues)
        if process is not None:
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
    )


def _check(root: etree._Element, issues: Issues) -> etree._Element | None:
    checks.check_definitions(root, issues)
    process, to_check = checks.select_process(root, issues)
    for candidate in to_check:
        checks.check_start_events(candidate, issues)
        checks.check_elements(candidate, issues)
        checks.check_flows(candidate, issues)
        checks.check_properties(candidate, issues)
        checks.check_code(candidate, issues)
    return process


def _spiff_parse(root: etree._Element, process: etree._Element, issues: Issues):
    """SpiffWorkflow's specs of ``process``, or None with its complaint added to ``issues``."""
    _strip_for_spiff(root)
    parser = BatonBpmnParser()
    try:
        parser.add_bpmn_xml(root)
        spec = parser.get_spec(process.get("id"))
        subprocess_specs = parser.get_subprocess_specs(process.get("id"))
    except SpiffWorkflowException as exc:  # ValidationException and friends
        issues.add_spiff_error(exc)
        return None
    except Exception as exc:
        if issues:  # Spiff tripping over something we already refused: our messages say it better
            log.debug("SpiffWorkflow failed on an already refused file: %r", exc)
        else:
            issues.add_internal_error(exc)
        return None
    return spec, subprocess_specs


def _strip_for_spiff(root: etree._Element) -> None:
    doomed = [el for el in root.iter() if isinstance(el.tag, str)
              and etree.QName(el).namespace == profile.BPMN_NS and local_name(el) in STRIPPED_BEFORE_SPIFF]
    for element in doomed:
        element.getparent().remove(element)


def start_events_of(process: etree._Element) -> list[StartEventInfo]:
    events = []
    for element in bpmn_children(process):
        if local_name(element) == "startEvent":
            properties = profile.read_properties(element)
            events.append(StartEventInfo(
                element_id=element.get("id"),
                trigger=properties.get("trigger") or None,
                channel=(properties.get("channel") or "").strip() or None,
                line=element.sourceline,
            ))
    return events
