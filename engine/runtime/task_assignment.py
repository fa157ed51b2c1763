"""Who a task is for, evaluated when its row opens, and the audience rows that put it in inboxes.

The model's settings (``bpmn.assignment``, in ``task_spec.extensions['assignment']``) are evaluated
with the variables the task opens with: an expression's value, a template's text, or the literal.
A setting that cannot be evaluated (a variable missing, a value of the wrong kind) leaves its field
unset (nobody assigned, no candidate from it, no due date, priority 50) and is logged: the task
still opens, where an operator with ``task.assign`` can hand it to someone, rather than failing the
instance for a matter of routing (docs/bpmn-profile.md, "Assignment").

``TaskAudience`` rows (``engine.store.operator_models``) say whom a task is for now: its assignee,
or while nobody holds it each candidate user and group. They are written here when a task opens
and rewritten by ``engine.tasks`` when it is claimed or assigned; their status follows the task's
by trigger.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select

from bpmn.assignment import DEFAULT_PRIORITY, MAX_NAME, instant, priority
from engine.errors import ScriptError
from engine.sandbox.expressions import evaluate, render
from engine.store.models import NO_DUE_DATE, Definition, Form, TaskAudience
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.tasks")

MAX_CANDIDATES = 50  # names per list: an expression yielding a huge list is cut here


@dataclass
class Assignment:
    assignee: str | None = None
    candidate_users: list[str] = field(default_factory=list)
    candidate_groups: list[str] = field(default_factory=list)
    due_at: datetime | None = None
    follow_up_at: datetime | None = None
    priority: int = DEFAULT_PRIORITY

    def columns(self) -> dict[str, Any]:
        """The task row's columns."""
        return {"assignee": self.assignee, "candidate_users": self.candidate_users or None,
                "candidate_groups": self.candidate_groups or None, "due_at": self.due_at,
                "due_order": self.due_at or NO_DUE_DATE, "follow_up_at": self.follow_up_at,
                "priority": self.priority}


def evaluate_assignment(settings: dict[str, Any], variables: dict[str, Any], created_at: datetime,
                        where: str) -> Assignment:
    """The settings' values for a task opening now with ``variables``; ``where`` names it in the log."""
    result = Assignment()
    if not settings:
        return result

    def value(name: str, setting: dict[str, str]) -> Any:
        try:
            if "expression" in setting:
                return evaluate(setting["expression"], variables)
            if "template" in setting:
                return render(setting["template"], variables)
            return setting["text"]
        except ScriptError as exc:
            log.warning("%s: %s not set: %s", where, name, exc.message)
            return None

    if "assignee" in settings:
        names = _names(value("assignee", settings["assignee"]), where, "assignee")
        result.assignee = names[0] if names else None
    for name in ("candidate_users", "candidate_groups"):
        names: list[str] = []
        for setting in settings.get(name) or []:
            names += _names(value(name, setting), where, name)
        setattr(result, name, list(dict.fromkeys(names))[:MAX_CANDIDATES])
    for name, column in (("due", "due_at"), ("follow_up", "follow_up_at")):
        raw = value(name, settings[name]) if name in settings else None
        if raw not in (None, ""):
            try:
                setattr(result, column, instant(raw, created_at))
            except ValueError as exc:
                log.warning("%s: %s not set: %s", where, name, exc)
    raw = value("priority", settings["priority"]) if "priority" in settings else None
    if raw not in (None, ""):
        try:
            result.priority = priority(raw)
        except ValueError as exc:
            log.warning("%s: priority left at %s: %s", where, DEFAULT_PRIORITY, exc)
    return result


def _names(value: Any, where: str, name: str) -> list[str]:
    """User or group names from a value: a text (a comma list), or a list of texts."""
    if value is None:
        return []
    items = value if isinstance(value, (list, tuple)) else str(value).split(",") if isinstance(value, str) else None
    if items is None:
        log.warning("%s: %s not set: the value is a %s, not a name or a list of names", where, name,
                    type(value).__name__)
        return []
    names = []
    for item in items:
        if isinstance(item, str) and item.strip() and len(item.strip()) <= MAX_NAME:
            names.append(item.strip())
        elif item not in (None, ""):
            log.warning("%s: %s %r skipped: a name is text of 1 to %s characters", where, name, item, MAX_NAME)
    return names


def audience(assignee: str | None, users: list[str] | None, groups: list[str] | None) -> list[str]:
    """The ``who`` of a task's audience rows."""
    if assignee:
        return [user_token(assignee)]
    return list(dict.fromkeys([user_token(user) for user in users or []] + [group_token(g) for g in groups or []]))


def user_token(user: str) -> str:
    return f"u:{user}"


def group_token(group: str) -> str:
    return f"g:{group}"


def add_audience(uow: UnitOfWork, rows: list[dict[str, Any]]) -> None:
    """Insert audience rows ``{task_id, tenant_id, status, who}`` in one statement."""
    if rows:
        uow.run(insert(TaskAudience), rows)


def replace_audience(uow: UnitOfWork, task) -> None:
    """A task's audience after its assignee changed (``task``: its row, already updated)."""
    uow.run(delete(TaskAudience).where(TaskAudience.task_id == task.id))
    add_audience(uow, [{"task_id": task.id, "tenant_id": task.tenant_id, "status": task.status, "who": who}
                       for who in audience(task.assignee, task.candidate_users, task.candidate_groups)])


def form_id_for(uow: UnitOfWork, tenant_id: int, definition_id: int, ref: dict[str, Any] | None,
                cache: dict) -> int | None:
    """The ``forms`` row a task's form reference names when it opens (``bpmn.camunda_forms``);
    ``cache``: per save, so a save opening many tasks of one form reads it once."""
    if not ref:
        return None
    key = (ref.get("key"), ref.get("binding"), ref.get("version"))
    if key in cache:
        return cache[key]
    if ref.get("binding") == "deployment":
        forms = uow.execute(select(Definition.forms).where(Definition.id == definition_id)).scalar_one_or_none()
        found = (forms or {}).get(ref["key"])
    else:
        query = select(Form.id).where(Form.tenant_id == tenant_id, Form.form_key == ref["key"])
        if ref.get("binding") == "version" and str(ref.get("version") or "").isdigit():
            query = query.where(Form.version == int(ref["version"]))
        found = uow.execute(query.order_by(Form.version.desc()).limit(1)).scalar_one_or_none()
    cache[key] = found
    return found
