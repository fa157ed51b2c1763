"""From an uploaded BPMN file to deployable definitions, or a refusal listing every problem.

Order: hardened XML reading (file-level refusals stop here), Baton's own checks (allowlist,
flows, events, loops, calls, Camunda extensions, profile properties, code; per process and
subprocess), then, for a file they pass, SpiffWorkflow's parser on each entry process, whose
complaints are translated into the same ``{element_id, line, message}`` entries. Nothing is
executed and nothing is fetched.

``parse_definition`` wants a file with one entry process (processes it calls may sit beside it);
``parse_definitions`` takes a collaboration too: each executable pool becomes a definition.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree
from SpiffWorkflow.bpmn.specs.bpmn_process_spec import BpmnProcessSpec
from SpiffWorkflow.exceptions import SpiffWorkflowException

from bpmn import checks
from bpmn.camunda_forms import read_forms
from bpmn.checks.human_tasks import HUMAN_TASKS, check_human_task
from bpmn.correlations import correlations_of
from bpmn.dmn.reader import read_decisions
from bpmn.dmn.task import check_business_rule_task
from bpmn.hardened_xml import read_bpmn_xml
from bpmn.issues import Issues, local_name
from bpmn.parser import BatonBpmnParser
from bpmn.serializer import spec_to_json
from bpmn.specs import all_task_specs
from bpmn.spiff_tree import prepare_for_spiff
from bpmn.summary import (StartEventInfo, TimerStartInfo, default_start, messages_of, start_events_of,
                          throws_of, timer_starts_of)
from engine.errors import BpmnValidationError

__all__ = ["ParsedDefinition", "StartEventInfo", "TimerStartInfo", "parse_definition", "parse_definitions"]


@dataclass
class ParsedDefinition:
    process_id: str
    name: str | None
    spec: BpmnProcessSpec
    subprocess_specs: dict[str, BpmnProcessSpec]  # embedded subprocesses and processes of the file it calls
    start_events: list[StartEventInfo]
    spec_json: str  # spec and subprocess specs, stored once per definition
    # callActivity calledElement values: codes of other definitions of the same tenant. Their
    # specs are not in subprocess_specs: the engine adds each (latest version) under this name.
    called_elements: list[str] = field(default_factory=list)
    timer_starts: list[TimerStartInfo] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # names the process can catch (process.message)
    # Correlation properties per message name: {property id: Python expression over the payload}
    # (bpmn.correlations); the engine matches a delivered message's values against the instance's.
    correlations: dict[str, dict[str, str]] = field(default_factory=dict)
    throws: list[str] = field(default_factory=list)  # message names it throws (end/throw events, send tasks)
    # The start event process.start begins at; with several start events the engine begins every
    # new workflow at the one its trigger names (bpmn.start_at), this one for process.start.
    default_start: str | None = None
    external_topics: list[str] = field(default_factory=list)  # topics of its external tasks
    forms: dict[str, dict] = field(default_factory=dict)  # the deploy's Camunda Forms by id (bpmn.camunda_forms)


def parse_definition(xml: str | bytes, dmn: list[str | bytes] = ()) -> ParsedDefinition:
    """The deployable definition of a file with one entry process; BpmnValidationError lists every
    problem. ``dmn``: the DMN files whose decisions its business rule tasks call."""
    return _parse(xml, list(dmn), [], {}, collaboration=False)[0]


def parse_definitions(xml: str | bytes, dmn: list[str | bytes] = (), forms: list[str] = (),
                      deployed_forms: dict[str, set[int]] | None = None) -> list[ParsedDefinition]:
    """One definition per entry process (the executable pools of a collaboration), in file order.
    The pools' message flows are honoured at run time by message name: a pool's throw reaches the
    instances (and message start events) that wait for that name. ``forms``: Camunda Forms (JSON
    texts) given with the file; ``deployed_forms``: the tenant's earlier forms, id -> versions."""
    return _parse(xml, list(dmn), list(forms), deployed_forms or {}, collaboration=True)


def _parse(xml: str | bytes, dmn: list[str | bytes], form_texts: list[str], deployed_forms: dict[str, set[int]], *,
           collaboration: bool) -> list[ParsedDefinition]:
    tree = read_bpmn_xml(xml)
    issues = Issues(tree)
    root = tree.getroot()
    entries, parsed = [], None
    try:
        decisions, problems = read_decisions(dmn)
        for problem in problems:
            issues.add_raw(problem["element_id"], problem["line"], problem["message"])
        forms, form_problems = read_forms(form_texts)
        for form_id, message in form_problems:
            issues.add_raw(form_id, None, message)
        entries = _check(root, issues, collaboration, decisions, (forms, deployed_forms))
        # SpiffWorkflow only sees files Baton's checks pass: its complaints about a file with
        # problems are mostly echoes of them, in words that mislead ("perhaps a form has the
        # same ID?"); anything only it finds is reported once the file is otherwise clean.
        if entries and not issues:
            parsed = _spiff_parse(root, entries, issues, decisions)
            for definition in parsed or []:
                definition.forms = forms
    except BpmnValidationError:
        raise
    except Exception as exc:  # a bug of ours or Spiff's must not escape as a 500 of deploy
        issues.add_internal_error(exc)
    issues.raise_if_any()
    if not parsed:  # every path that yields nothing has added an issue
        issues.add_internal_error(RuntimeError("BPMN checks produced neither specs nor issues"))
        issues.raise_if_any()
    return parsed


def _check(root: etree._Element, issues: Issues, collaboration: bool, decisions: dict,
           forms: tuple[dict, dict] = ({}, {})) -> list[etree._Element]:
    checks.check_definitions(root, issues)
    correlations_of(root, issues)
    if collaboration:
        entries, to_check = checks.select_processes(root, issues)
    else:
        process, to_check = checks.select_process(root, issues)
        entries = [process] if process is not None else []
    for candidate in to_check:
        checks.check_start_events(candidate, issues)
        for container in checks.containers(candidate):
            for check in checks.CONTAINER_CHECKS:
                check(container, issues)
            for element in checks.content(container):
                if local_name(element) == "businessRuleTask":
                    check_business_rule_task(element, decisions, issues)
                elif local_name(element) in HUMAN_TASKS:
                    check_human_task(element, *forms, issues)
    return entries


def _spiff_parse(root: etree._Element, entries: list[etree._Element], issues: Issues,
                 decisions: dict) -> list[ParsedDefinition] | None:
    """SpiffWorkflow's specs of each entry process, or None with its complaint added to ``issues``."""
    correlations = correlations_of(root)  # before the tree is rewritten (Spiff's copy is stripped)
    summaries = [(process, _summary(process, correlations)) for process in entries]
    prepare_for_spiff(root, [called for process in entries for called in checks.called_in_file(process)])
    parser = BatonBpmnParser(decisions, correlations)
    parsed = []
    try:
        parser.add_bpmn_xml(root)
        for process, summary in summaries:
            spec = parser.get_spec(process.get("id"))
            # Processes of other definitions: Spiff leaves None for them, dropped here.
            subprocess_specs = {name: sub for name, sub in parser.get_subprocess_specs(
                process.get("id"), require_call_activity_specs=False).items() if sub is not None}
            parsed.append(_definition(process, spec, subprocess_specs, summary))
    except SpiffWorkflowException as exc:  # ValidationException and friends
        issues.add_spiff_error(exc)
        return None
    except Exception as exc:  # checks passed, so this is a gap in them (or a bug of Spiff's)
        issues.add_internal_error(exc)
        return None
    return parsed


def _summary(process: etree._Element, correlations: dict) -> dict:
    starts = start_events_of(process)
    messages, throws = messages_of(process), throws_of(process)
    return {"start_events": starts, "default_start": default_start(starts),
            "called_elements": checks.called_elements(process), "timer_starts": timer_starts_of(process),
            "messages": messages, "throws": throws,
            "correlations": {name: props for name, props in correlations.items() if name in messages + throws}}


def _definition(process, spec, subprocess_specs, summary: dict) -> ParsedDefinition:
    topics = [ts.extensions["external"]["topic"] for ts in all_task_specs(spec, subprocess_specs)
              if "external" in getattr(ts, "extensions", {})]
    return ParsedDefinition(process_id=process.get("id"), name=process.get("name") or None, spec=spec,
                            subprocess_specs=subprocess_specs, spec_json=spec_to_json(spec, subprocess_specs),
                            external_topics=list(dict.fromkeys(topics)), **summary)
