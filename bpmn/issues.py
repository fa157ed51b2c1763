"""Deploy refusals: the ``{element_id, line, message}`` entries of ``BpmnValidationError``.

Validation collects every problem of a file before refusing it, so the modeler can fix them all in
one round; ``Issues`` is that collection, and it also translates SpiffWorkflow's parser exceptions
(which carry an element id but rarely a usable line) into the same shape.
"""
from __future__ import annotations

import logging
import re
from typing import Any

from lxml import etree

from engine.errors import BpmnValidationError

log = logging.getLogger("baton.bpmn")

INTERNAL_MESSAGE = ("The file could not be checked because of an internal error in Baton; "
                    "the error has been logged.")


def issue(element_id: str | None, line: int | None, message: str) -> dict[str, Any]:
    return {"element_id": element_id, "line": line, "message": message}


def local_name(element: etree._Element) -> str:
    return etree.QName(element).localname


class Issues:
    """The problems found in one file, without duplicates; raised in file order."""

    def __init__(self, tree: etree._ElementTree):
        self._items: list[dict[str, Any]] = []
        # Spiff's exceptions name elements by id; the line comes from our own tree.
        self._by_id = {el.get("id"): el for el in tree.iter() if isinstance(el.tag, str) and el.get("id")}

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def element_ids(self) -> set[str | None]:
        return {item["element_id"] for item in self._items}

    def add(self, element: etree._Element | None, message: str, *, at: etree._Element | None = None) -> None:
        """One problem of ``element`` (its id), reported at ``at``'s line (default: the element's)."""
        element_id = element.get("id") if element is not None else None
        where = at if at is not None else element
        self.add_raw(element_id, where.sourceline if where is not None else None, message)

    def add_raw(self, element_id: str | None, line: int | None, message: str) -> None:
        entry = issue(element_id, line, message)
        if entry not in self._items:
            self._items.append(entry)

    def add_spiff_error(self, exc: Exception) -> None:
        """A SpiffWorkflow parser exception, unless it is about an element already refused
        (or inside one: Spiff also parses the insides of a subprocess we refused as a whole)."""
        element_id = getattr(exc, "id", None) or None
        element = self._by_id.get(element_id)
        refused = self.element_ids
        if element_id in refused or any(a.get("id") in refused for a in _ancestors(element)):
            return  # our own message for this element is the clearer one
        line = element.sourceline if element is not None else _int_or_none(getattr(exc, "line_number", None))
        tag = local_name(element) if element is not None else None
        text = _spiff_text(exc)
        self.add_raw(element_id, line, f"{tag}: {text}." if tag else f"{text}.")

    def add_internal_error(self, exc: BaseException) -> None:
        log.error("unexpected error while checking a BPMN file", exc_info=exc)
        self.add_raw(None, None, INTERNAL_MESSAGE)

    def raise_if_any(self) -> None:
        if self._items:
            # In file order, as the modeler will walk through them; file-level ones first.
            raise BpmnValidationError(sorted(self._items, key=lambda item: item["line"] or 0))


def _ancestors(element: etree._Element | None):
    while element is not None:
        element = element.getparent()
        if element is not None:
            yield element


# Spiff wraps any exception of its task parsers as ValidationException(repr(exc)); such reprs can
# carry whole XML fragments and say nothing to a modeler.
_WRAPPED_REPR = re.compile(r"^(\w+(?:Error|Exception))\(")


def _spiff_text(exc: Exception) -> str:
    text = str((exc.args[0] if exc.args else str(exc)) or type(exc).__name__)
    wrapped = _WRAPPED_REPR.match(text)
    if wrapped:
        return f"SpiffWorkflow cannot parse this element ({wrapped.group(1)})"
    text = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return text[:300].rstrip(".")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None
