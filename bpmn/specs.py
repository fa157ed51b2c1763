"""Questions about a parsed process as a whole, asked per advance to skip work a process cannot need.

A parsed process never changes once deployed (``engine.store.workflows.SpecCache`` hands the same
objects to every advance), so each answer is computed once per process and kept beside it
(``answer``): a walk of every task spec costs more than the work most of these questions skip.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Iterator

_ANSWERS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()


def all_task_specs(spec, subprocess_specs: dict) -> Iterator:
    """Every task spec of the process and of the subprocesses and called processes it carries."""
    for process in (spec, *subprocess_specs.values()):
        yield from process.task_specs.values()


def answer(question: Callable[[Any, dict], Any], spec, subprocess_specs: dict) -> Any:
    """``question(spec, subprocess_specs)``, computed once per parsed process (and the subprocess
    specs it was asked with)."""
    answers = _ANSWERS.get(spec)
    if answers is None:
        answers = _ANSWERS.setdefault(spec, {})
    key = (question, tuple(map(id, subprocess_specs.values())))
    try:
        return answers[key]
    except KeyError:
        value = answers[key] = question(spec, subprocess_specs)
        return value


def _operators_used(spec, subprocess_specs: dict) -> frozenset:
    return frozenset(ts.extensions.get("operator") for ts in all_task_specs(spec, subprocess_specs)
                     if ts.manual and getattr(ts, "extensions", None))


def operators_used(spec, subprocess_specs: dict) -> frozenset:
    """The ``operator`` property of every manual task (None for one without, e.g. a user task)."""
    return answer(_operators_used, spec, subprocess_specs)


def any_task_spec(predicate: Callable[[Any], bool], spec, subprocess_specs: dict) -> bool:
    """Whether any task spec of the process satisfies ``predicate`` (a module-level function: it is
    the answer's key)."""
    return answer(_AnyOf(predicate), spec, subprocess_specs)


class _AnyOf:
    """A question keyed by its predicate: equal for the same predicate."""

    __slots__ = ("predicate",)

    def __init__(self, predicate: Callable[[Any], bool]):
        self.predicate = predicate

    def __eq__(self, other) -> bool:
        return isinstance(other, _AnyOf) and other.predicate is self.predicate

    def __hash__(self) -> int:
        return hash(self.predicate)

    def __call__(self, spec, subprocess_specs: dict) -> bool:
        return any(self.predicate(ts) for ts in all_task_specs(spec, subprocess_specs))
