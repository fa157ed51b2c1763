"""Messages and signals from outside: ``message.correlate`` (Camunda's correlation by name and
values) and ``signal.broadcast``; where they go is ``engine.runtime.routing``."""
from __future__ import annotations

from typing import Any

from engine.errors import ConflictError
from engine.runtime import routing
from engine.store.unit_of_work import UnitOfWork


def correlate(uow: UnitOfWork, tenant_id: int, name: str, correlation: dict[str, Any], variables: dict[str, Any], *,
              every: bool) -> dict[str, Any]:
    """Deliver message ``name`` to the waiting instance its ``correlation`` matches (``every``: to
    all that match), else start the processes whose message start event has that name; a
    ``conflict`` when it would reach nobody, or several without ``every`` (nothing changes then)."""
    result = routing.deliver(uow, tenant_id, "message", name, variables, correlation, single=not every)
    if not result["reached"] and not result["started"]:
        said = f" with the correlation {correlation}" if correlation else ""
        raise ConflictError(f"No instance waits for the message '{name}'{said}, and no process starts with it.")
    return {"message": name, **result}


def broadcast(uow: UnitOfWork, tenant_id: int, name: str, variables: dict[str, Any]) -> dict[str, Any]:
    """Signal ``name`` to every instance waiting for it and start every process it starts."""
    result = routing.deliver(uow, tenant_id, "signal", name, variables, {})
    return {"signal": name, **result}
