"""One page of a list method's rows, newest first, in the shape every ``*.list`` method answers:
``{"items": [...], "page": n, "per_page": n, "total": n}`` (docs/api.md, "Conventions")."""
from __future__ import annotations

from typing import Any, Callable

from sqlalchemy import Select, func, select

from engine.store.unit_of_work import UnitOfWork


def page_of(uow: UnitOfWork, query: Select, newest_first: Any, *, page: int, per_page: int,
            item: Callable[[Any], dict[str, Any]], scalars: bool = False) -> dict[str, Any]:
    """Count what ``query`` selects, then render page ``page`` of it ordered by ``newest_first``
    descending: each row through ``item`` (``scalars``: the row's first column alone, e.g. a
    model object). The caller has scoped ``query`` to its tenant."""
    total = uow.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    result = uow.execute(query.order_by(newest_first.desc()).limit(per_page).offset((page - 1) * per_page))
    rows = result.scalars() if scalars else result.all()
    return {"items": [item(row) for row in rows], "page": page, "per_page": per_page, "total": total}
