"""The ids a log line carries (tenant, instance, job, request), where the code knows them.

Set by the worker loop for the job it runs and by the request layer for the request it serves;
``engine.telemetry.logs`` adds them to every record.
"""
from __future__ import annotations

from contextvars import ContextVar

FIELDS = ("tenant_id", "instance_id", "job_id", "request_id")
_VARS = {name: ContextVar(f"baton_{name}", default=None) for name in FIELDS}


def current() -> dict[str, object]:
    """The ids known here (only those set)."""
    found = {}
    for name, var in _VARS.items():
        value = var.get()
        if value is not None:
            found[name] = value
    return found


def set_ids(**ids: object) -> None:
    """Set ids for the rest of this context (a request: the tenant once the key is known)."""
    for name, value in ids.items():
        _VARS[name].set(value)


class bound:
    """``with bound(job_id=7): ...``: these ids for the code inside; the earlier ones again after it.
    (A class, not a generator: it wraps every request and every job.)"""

    __slots__ = ("ids", "tokens")

    def __init__(self, **ids: object):
        self.ids = ids

    def __enter__(self) -> None:
        self.tokens = [(_VARS[name], _VARS[name].set(value)) for name, value in self.ids.items()]

    def __exit__(self, *_exc) -> None:
        for var, token in reversed(self.tokens):
            var.reset(token)
