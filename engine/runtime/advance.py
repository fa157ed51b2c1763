"""One advance of an instance as its contributors see it, and the protocol they follow.

An advance saves the instance's new state and deletes its job; everything else it writes (task
rows, the outbox's messages, timer and operator jobs, subscriptions, thrown events ...) belongs to
the module that owns those rows. Each such module registers a *contributor* (``create_app`` builds
the list, in the order their rows are locked): given the advance, it answers the write it adds to
the save's unit of work, or None when this advance changes nothing of its rows. The runner only
steps SpiffWorkflow, collects the contributions and saves; an advance that no contributor adds to
is a plain save (``engine.runtime.runner``).

Modules below ``runtime`` in the layers (``chat``, ``outbound``) contribute too: the protocol is
structural, so they read an ``Advance``'s attributes without importing this module.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from engine.jobs import ClaimedJob
from engine.runtime.outcome import Outcome
from engine.store.unit_of_work import UnitOfWork

Write = Callable[[UnitOfWork], None]


@dataclass
class Advance:
    """One advance: its job, the row it started from (``tenant_id``, ``definition_id``, ``state``,
    ``revision``, ``waiting_for`` before it), the specs it ran with and the call activity targets
    pinned, what it produced (``outcome``), and the conversation side (``outbox``, or None for a
    process that never talks)."""

    job: ClaimedJob
    worker_id: str
    row: Any
    specs: tuple
    pinned: dict
    outcome: Outcome
    outbox: Any

    @property
    def instance_id(self) -> int:
        return self.job.instance_id

    @property
    def tenant_id(self) -> int:
        return self.row.tenant_id

    @property
    def running(self) -> bool:
        return self.outcome.status == "running"


class Contributor(Protocol):
    """A module that owns rows hanging off an instance, written with each save that changes them."""

    def contribute(self, advance: Advance) -> Write | None:
        """The write this advance adds to its save (run in the save's unit of work), or None."""
