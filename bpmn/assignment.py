"""Who a human task is for and when it is due, as Camunda Modeler writes it: read at deploy into
``task_spec.extensions['assignment']``, evaluated when the task opens (``engine.runtime.task_assignment``).

Camunda 7 attributes on a userTask: ``camunda:assignee``, ``camunda:candidateUsers`` and
``camunda:candidateGroups`` (comma lists), ``camunda:dueDate``, ``camunda:followUpDate`` (an ISO
8601 date-time, or a duration from the task's creation) and ``camunda:priority`` (0-100); Camunda 8
writes the same in ``zeebe:assignmentDefinition``, ``zeebe:taskSchedule`` and
``zeebe:priorityDefinition``. A value is plain text, one ``${...}`` JUEL (or ``=`` FEEL)
expression, or text with ``${...}`` or ``{{ }}`` pieces (a template): expressions are translated to
the sandbox's Python here, so nothing of JUEL runs later, and what cannot be translated or is not a
valid literal is refused naming the element. A task in a lane (SpiffArena's way) with no
assignment of its own has the lane's name as its candidate group.

A setting is stored as ``{"text": str}``, ``{"expression": python}`` or ``{"template": text}``.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from lxml import etree
from SpiffWorkflow.bpmn.specs.event_definitions.timer import TimerEventDefinition

from bpmn.expressions import translate
from bpmn.profile import BPMN_NS, CAMUNDA_NS, ZEEBE_NS
from engine.sandbox import check_template

DEFAULT_PRIORITY = 50
MAX_NAME = 200  # a user or group name (api_keys.user, tasks.assignee)
LIST_FIELDS = ("candidate_users", "candidate_groups")
# setting name -> (Camunda 7 attribute, Camunda 8 element, its attribute)
_ATTRIBUTES = {
    "assignee": ("assignee", "assignmentDefinition", "assignee"),
    "candidate_users": ("candidateUsers", "assignmentDefinition", "candidateUsers"),
    "candidate_groups": ("candidateGroups", "assignmentDefinition", "candidateGroups"),
    "due": ("dueDate", "taskSchedule", "dueDate"),
    "follow_up": ("followUpDate", "taskSchedule", "followUpDate"),
    "priority": ("priority", "priorityDefinition", "priority"),
}
_JUEL_PIECE = re.compile(r"[$#]\{(.*?)\}", re.S)
_LATEST_YEAR = 9000  # a due date past this is a mistake, and would not fit Task.due_order's sorting


def attribute_text(node: etree._Element, name: str) -> str | None:
    """The raw text of setting ``name`` on a task element, from Camunda 7 or 8 (None: not given)."""
    camunda, element, attribute = _ATTRIBUTES[name]
    value = node.get(f"{{{CAMUNDA_NS}}}{camunda}")
    if value is None:
        found = node.find(f"{{{BPMN_NS}}}extensionElements/{{{ZEEBE_NS}}}{element}")
        value = found.get(attribute) if found is not None else None
    return value if value is not None and value.strip() else None


def read_assignment(node: etree._Element) -> tuple[dict[str, Any], list[str]]:
    """``(settings, problems)`` of a human task element: each problem one sentence naming the attribute."""
    settings: dict[str, Any] = {}
    problems: list[str] = []
    for name, (camunda, _element, _attribute) in _ATTRIBUTES.items():
        raw = attribute_text(node, name)
        if raw is None:
            continue
        if name in LIST_FIELDS:
            items = [_setting(item.strip()) for item in _split_outside_braces(raw) if item.strip()]
            problem = next((p for _s, p in items if p), None)
            if problem:
                problems.append(f"camunda:{camunda} '{raw.strip()[:80]}' cannot be read: {problem}")
            else:
                settings[name] = [s for s, _p in items]
            continue
        setting, problem = _setting(raw.strip())
        problem = problem or _literal_problem(name, setting)
        if problem:
            problems.append(f"camunda:{camunda} '{raw.strip()[:80]}' cannot be read: {problem}")
        else:
            settings[name] = setting
    if not any(name in settings for name in ("assignee", *LIST_FIELDS)):
        lane = lane_of(node)
        if lane:
            settings["candidate_groups"] = [{"text": lane}]
    return settings, problems


def lane_of(node: etree._Element) -> str | None:
    """The name of the innermost lane whose flowNodeRef is this element, if any."""
    element_id = node.get("id")
    root = node.getroottree().getroot()
    found = None
    for lane in root.iter(f"{{{BPMN_NS}}}lane"):
        refs = [(ref.text or "").strip() for ref in lane.findall(f"{{{BPMN_NS}}}flowNodeRef")]
        if element_id in refs and (lane.get("name") or "").strip():
            found = lane.get("name").strip()[:MAX_NAME]  # iter() is document order: inner lanes come later
    return found


def _split_outside_braces(raw: str) -> list[str]:
    """``a, ${b}, c`` -> items; a comma inside ``${...}`` or ``{{ }}`` does not split."""
    items, depth, current = [], 0, []
    for char in raw:
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(0, depth - 1)
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    items.append("".join(current))
    return items


def _setting(text: str) -> tuple[dict[str, str] | None, str | None]:
    """One value as stored, or the reason it cannot be."""
    translation = translate(text)
    if translation.dialect is not None and translation.python is not None:
        return {"expression": translation.python}, None
    if "${" in text or "#{" in text:  # text around ${...}: a template whose pieces are translated
        problem = None

        def piece(match):
            nonlocal problem
            inner = translate("${" + match.group(1) + "}")
            if inner.python is None:
                problem = problem or inner.problem
                return ""
            return "{{ " + inner.python + " }}"

        template = _JUEL_PIECE.sub(piece, text)
        if problem:
            return None, problem
        problem = check_template(template)
        return ({"template": template}, None) if problem is None else (None, problem)
    if translation.dialect is not None:  # JUEL or FEEL that cannot be translated
        return None, translation.problem
    if "{{" in text:
        problem = check_template(text)
        return ({"template": text}, None) if problem is None else (None, problem)
    return {"text": text}, None


def _literal_problem(name: str, setting: dict[str, str]) -> str | None:
    if "text" not in setting:
        return None
    text = setting["text"]
    if name in ("due", "follow_up"):
        try:
            instant(text, datetime(2000, 1, 1))
        except ValueError as exc:
            return str(exc)
    if name == "priority":
        try:
            priority(text)
        except ValueError as exc:
            return str(exc)
    if name == "assignee" and len(text) > MAX_NAME:
        return f"a user name is at most {MAX_NAME} characters"
    return None


def instant(value: Any, created_at: datetime) -> datetime:
    """A due or follow-up value as a naive UTC instant: an ISO 8601 date-time (UTC when it has no
    zone), a datetime, or an ISO 8601 duration counted from ``created_at`` (naive UTC). ValueError says why not."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str) and value.strip().upper().startswith("P"):
        moment = created_at + _duration(value.strip(), created_at)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError("it is neither an ISO 8601 date-time such as 2026-12-01T17:00:00Z nor a "
                             "duration such as P2D or PT4H") from None
    else:
        raise ValueError(f"a date-time or duration is text, not {type(value).__name__}")
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    if moment.year >= _LATEST_YEAR:
        raise ValueError(f"the date is after the year {_LATEST_YEAR}")
    return moment


def _duration(text: str, start: datetime) -> timedelta:
    try:
        parts = TimerEventDefinition.parse_iso_duration(text)
    except Exception:  # SpiffWorkflow raises a bare Exception for a malformed duration
        parts = None
    if not parts:
        raise ValueError(f"'{text[:40]}' is not an ISO 8601 duration such as P2D or PT4H")
    if parts.get("years", 0) * 12 + parts.get("months", 0) > 12 * 100:
        raise ValueError("the duration is longer than 100 years")
    return TimerEventDefinition.get_timedelta_from_start(dict(parts), start.replace(tzinfo=timezone.utc))


def priority(value: Any) -> int:
    """A priority 0-100 from an integer or its text; ValueError says why not."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if type(value) is not int:
        raise ValueError("a priority is a whole number from 0 to 100")
    if not 0 <= value <= 100:
        raise ValueError(f"a priority is from 0 to 100, not {value}")
    return value
