"""Timer definitions: what a modeler writes, and the Python expression SpiffWorkflow evaluates.

SpiffWorkflow 3.2 evaluates the text of timeDate/timeDuration/timeCycle as a Python expression
with the script engine, so it wants ``"PT5M"`` with quotes. Camunda's cron cycles (``0 0 9 * * ?``)
are read by ``bpmn.cron``; JUEL and FEEL texts are translated (``bpmn.expressions``). Camunda Modeler users write
``PT5M``, ``2026-12-01T10:00:00Z`` or ``R3/PT10S`` bare. ``read_timer`` turns either form into one
``Timer``: a bare ISO 8601 literal becomes a quoted Python string literal, a Python expression
stays as written (checked by the sandbox), and literal values are validated with SpiffWorkflow's
own helpers, so a timer that deploys is one SpiffWorkflow can read.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from datetime import datetime

from lxml import etree
from SpiffWorkflow.bpmn.specs.event_definitions.timer import TimerEventDefinition

from bpmn.allowlist import MAX_TIMER_CYCLES
from bpmn.cron import Cron, looks_like_cron
from bpmn.expressions import translate
from bpmn.timedeltas import rewrite_timedelta
from bpmn.issues import local_name
from bpmn.profile import BPMN_NS
from engine.sandbox import check_expression

KINDS = ("timeDate", "timeDuration", "timeCycle")
_EXAMPLES = {"timeDate": "2026-12-01T10:00:00Z", "timeDuration": "PT5M", "timeCycle": "R3/PT10M"}
_LITERAL = {
    "timeDuration": re.compile(r"^[Pp][Tt]?\d"),
    "timeDate": re.compile(r"^\d{4}-?(\d{2}|W\d)"),
    "timeCycle": re.compile(r"^[Rr]\d*/"),
}


@dataclass(frozen=True)
class Timer:
    kind: str                  # timeDate | timeDuration | timeCycle
    text: str                  # as written in the file, stripped
    expression: str | None     # the Python expression SpiffWorkflow evaluates; None if unusable
    problem: str | None        # one sentence why the timer cannot run, or None
    element: etree._Element | None = None  # the timeDate/... element (for its line)
    cron: bool = False         # a timeCycle written as a Quartz cron (bpmn.cron)

    @property
    def literal(self) -> str | None:
        """The ISO 8601 value, when it is known at deploy (a literal, bare or quoted)."""
        if self.expression is None:
            return None
        try:
            value = ast.literal_eval(self.expression)
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None


def read_timer(definition: etree._Element) -> Timer:
    """The timer of a ``timerEventDefinition`` element."""
    specs = [child for child in definition
             if isinstance(child.tag, str) and etree.QName(child).namespace == BPMN_NS
             and local_name(child) in KINDS]
    if len(specs) != 1:
        found = "no" if not specs else "more than one of"
        return Timer("timeDuration", "", None,
                     f"timerEventDefinition has {found} timeDate, timeDuration or timeCycle; give it exactly one.")
    element = specs[0]
    kind, text = local_name(element), (element.text or "").strip()
    if kind == "timeCycle" and looks_like_cron(text):
        try:
            Cron.parse(text)
        except ValueError as exc:
            return Timer(kind, text, None, f"timeCycle '{_shorten(text)}' is not a cron expression Baton reads: "
                                           f"{exc}.", element, cron=True)
        return Timer(kind, text, json.dumps(text), None, element, cron=True)
    expression, problem = _normalize(kind, text)
    return Timer(kind, text, expression, problem, element)


def _normalize(kind: str, text: str) -> tuple[str | None, str | None]:
    example = _EXAMPLES[kind]
    if not text:
        return None, f"{kind} is empty; write an ISO 8601 value such as {example}."
    translation = translate(text)
    if translation.problem is not None:
        return None, (f"{kind} '{_shorten(text)}' cannot be translated from {translation.dialect}: "
                      f"{translation.problem}; write an ISO 8601 value such as {example}, or a Python "
                      "expression that computes one.")
    if translation.dialect is not None:  # JUEL ${delay} or FEEL = "PT5M": read as the Python it means
        text = translation.python
    try:
        rewritten = rewrite_timedelta(kind, text)  # SpiffArena's timedelta(minutes=5)
    except ValueError as exc:
        return None, f"{kind} '{_shorten(text)}' cannot be read: {exc}."
    if rewritten is not None:
        text = rewritten
    if _LITERAL[kind].match(text):  # bare, as Camunda Modeler users write it
        problem = validate_literal(kind, text)
        return (None, problem) if problem else (json.dumps(text), None)
    for other, pattern in _LITERAL.items():
        if pattern.match(text):
            return None, (f"{kind} '{_shorten(text)}' is written like a {other}; put it in a {other} "
                          f"element, or write a {kind} such as {example}.")
    try:
        value = ast.literal_eval(text)  # already a Python literal, as SpiffArena users write it
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, str):
        problem = validate_literal(kind, value.strip())
        return (None, problem) if problem else (json.dumps(value.strip()), None)
    if kind == "timeCycle":
        # R/... repeats forever and a computed R<n> is unknown until it runs: both refused here.
        return None, (f"timeCycle '{_shorten(text)}' must be a literal R<n>/<duration> such as {example}, "
                      "so that its number of repetitions is known at deploy.")
    if value is not None:
        return None, f"{kind} '{_shorten(text)}' must be text, such as {example}."
    reason = check_expression(text)
    if reason is not None:
        return None, f"{kind} '{_shorten(text)}' cannot run: {reason.rstrip('.')}."
    return text, None  # computed by the sandbox when the timer starts


def validate_literal(kind: str, value: str) -> str | None:
    """None if SpiffWorkflow reads ``value`` as a ``kind``, else one sentence why not."""
    example = _EXAMPLES[kind]
    try:
        if kind == "timeDuration":
            if not value.upper().startswith("P") or not TimerEventDefinition.parse_iso_duration(value):
                raise ValueError(value)
        elif kind == "timeDate":
            if not isinstance(TimerEventDefinition.parse_time_or_duration(value), datetime):
                raise ValueError(value)
        else:
            return _validate_cycle(value)
    except Exception:  # Spiff's helpers raise bare Exception, ValueError, AttributeError ...
        what = "an ISO 8601 duration" if kind == "timeDuration" else "an ISO 8601 date and time"
        return f"{kind} '{_shorten(value)}' is not {what} such as {example}."
    return None


def _validate_cycle(value: str) -> str | None:
    match = re.match(r"^[Rr](\d*)/", value)
    if match is None:
        return f"timeCycle '{_shorten(value)}' is not an ISO 8601 repeating interval such as R3/PT10M."
    if not match.group(1):
        return (f"timeCycle '{_shorten(value)}' repeats forever; write the number of repetitions, "
                f"such as R{min(10, MAX_TIMER_CYCLES)}/..., at most {MAX_TIMER_CYCLES}.")
    cycles = int(match.group(1))
    if not 1 <= cycles <= MAX_TIMER_CYCLES:
        return f"timeCycle '{_shorten(value)}' repeats {cycles} times; it must be 1 to {MAX_TIMER_CYCLES}."
    try:
        TimerEventDefinition.parse_iso_recurring_interval(value)
    except Exception:
        return f"timeCycle '{_shorten(value)}' is not an ISO 8601 repeating interval such as R3/PT10M."
    return None


def _shorten(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"
