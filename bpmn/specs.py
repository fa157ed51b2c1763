"""Questions about a parsed process as a whole, asked per advance to skip work a process cannot need."""
from __future__ import annotations

from typing import Iterator


def all_task_specs(spec, subprocess_specs: dict) -> Iterator:
    """Every task spec of the process and of the subprocesses and called processes it carries."""
    for process in (spec, *subprocess_specs.values()):
        yield from process.task_specs.values()


def operators_used(spec, subprocess_specs: dict) -> frozenset:
    """The ``operator`` property of every manual task (None for one without, e.g. a user task)."""
    return frozenset(ts.extensions.get("operator") for ts in all_task_specs(spec, subprocess_specs)
                     if ts.manual and getattr(ts, "extensions", None))
