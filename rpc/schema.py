"""Each JSON-RPC method's params and result, declared once, as data (``RpcMethod(params=..., result=...)``).

A param's ``Kind`` is both the check its value goes through before the handler runs (``rpc.params``'
checks, with their messages) and the JSON Schema that ``rpc.openrpc`` publishes for it: there is no
second list to drift from the first. A result is a JSON Schema built with the helpers at the end.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidParamsError
from rpc.params import MAX_INT, _check_int, _check_str, _fail, reject_unknown


class Kind:
    """What a param's value must be: ``check`` returns it (or refuses it, naming ``name``);
    ``schema`` is its JSON Schema. ``check`` never sees ``null`` (``Param`` handles it)."""

    def check(self, name: str, value: Any) -> Any:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int | None = None
    maximum: int | None = None

    def check(self, name: str, value: Any) -> int:
        return _check_int(name, value, self.minimum, self.maximum)

    def schema(self) -> dict[str, Any]:
        maximum = MAX_INT if self.maximum is None else min(self.maximum, MAX_INT)
        return {"type": "integer", "minimum": -MAX_INT if self.minimum is None else self.minimum, "maximum": maximum}


@dataclass(frozen=True)
class Text(Kind):
    max_len: int | None = None
    allow_empty: bool = False

    def check(self, name: str, value: Any) -> str:
        return _check_str(name, value, self.max_len, self.allow_empty)

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string"}
        if not self.allow_empty:
            schema["minLength"] = 1
        if self.max_len is not None:
            schema["maxLength"] = self.max_len
        return schema


@dataclass(frozen=True)
class Choice(Kind):
    choices: tuple[str, ...]

    def check(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            options = ", ".join(f"'{choice}'" for choice in self.choices)
            raise _fail(name, f"Parameter '{name}' must be one of {options}.")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.choices)}


@dataclass(frozen=True)
class Flag(Kind):
    def check(self, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _fail(name, f"Parameter '{name}' must be true or false.")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class JsonObject(Kind):
    """Any JSON object (variables, a result, settings checked further by the engine)."""

    def check(self, name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(name, f"Parameter '{name}' must be an object.")
        return value

    def schema(self) -> dict[str, Any]:
        return {"type": "object"}


@dataclass(frozen=True)
class IdOrCode(Kind):
    """An id (an integer, at least 1) or a code (a non-empty string)."""

    max_len: int = 200

    def check(self, name: str, value: Any) -> int | str:
        if type(value) is int:
            return _check_int(name, value, 1, None)
        if isinstance(value, str):
            return _check_str(name, value, self.max_len, allow_empty=False)
        raise _fail(name, f"Parameter '{name}' must be an integer or a string.")

    def schema(self) -> dict[str, Any]:
        return {"oneOf": [Integer(minimum=1).schema(), Text(max_len=self.max_len).schema()]}


@dataclass(frozen=True)
class ListOf(Kind):
    """An array of ``item``s (each checked as ``name[i]``), ``min_items`` to ``max_items`` of them."""

    item: Kind
    min_items: int = 0
    max_items: int | None = None
    noun: str = "items"  # what the count message calls them: "files", "topics"

    def check(self, name: str, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise _fail(name, f"Parameter '{name}' must be an array.")
        if len(value) < self.min_items or (self.max_items is not None and len(value) > self.max_items):
            raise _fail(name, f"Parameter '{name}' must hold {self._count()} {self.noun}.")
        return [self.item.check(f"{name}[{index}]", item) for index, item in enumerate(value)]

    def _count(self) -> str:
        if self.max_items is None:
            return f"at least {self.min_items}"
        return f"at most {self.max_items}" if self.min_items == 0 else f"{self.min_items} to {self.max_items}"

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "array", "items": self.item.schema()}
        if self.min_items:
            schema["minItems"] = self.min_items
        if self.max_items is not None:
            schema["maxItems"] = self.max_items
        return schema


@dataclass(frozen=True)
class Record(Kind):
    """An object with declared members, each checked like a param named ``name.member``."""

    members: tuple["Param", ...]

    def check(self, name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(name, f"Parameter '{name}' must be an object.")
        return check_params(self.members, value, prefix=f"{name}.")

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": {member.name: member.schema() for member in self.members},
                "required": [member.name for member in self.members if member.required],
                "additionalProperties": False}


@dataclass(frozen=True)
class Param:
    """One named param. ``null`` counts as absent (then ``default`` applies), unless ``nullable``:
    there ``null`` is a value of its own (a secret to remove) and a required one must still be given."""

    name: str
    kind: Kind
    required: bool = False
    default: Any = None
    description: str = ""
    nullable: bool = False

    def schema(self, described: bool = True) -> dict[str, Any]:
        """The JSON Schema of its value; ``described``: with the description (OpenRPC puts a
        param's beside its schema)."""
        schema = self.kind.schema()
        if self.nullable:
            schema = {"oneOf": [schema, {"type": "null"}]}
        if self.default is not None:
            schema = {**schema, "default": self.default}
        if described and self.description:
            schema = {**schema, "description": self.description}
        return schema


def check_params(params: Sequence[Param], given: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The checked params: unknown names refused first, then each declared param in order. The
    answer holds a param when it was given (a nullable one's ``null`` too) or has a default, so a
    handler reads ``checked.get(name)`` and may tell "left out" from "given" by ``name in checked``."""
    if prefix:
        unknown = sorted(set(given) - {param.name for param in params})
        if unknown:
            names = ", ".join(f"'{prefix}{name}'" for name in unknown)
            raise InvalidParamsError(f"Unknown parameter{'s' if len(unknown) > 1 else ''} {names}.",
                                     data={"params": [prefix + name for name in unknown]})
    else:
        reject_unknown(dict(given), {param.name for param in params})
    checked: dict[str, Any] = {}
    for param in params:
        name = prefix + param.name
        value = given.get(param.name)
        if value is not None:
            checked[param.name] = param.kind.check(name, value)
        elif param.nullable and param.name in given:
            checked[param.name] = None
        elif param.required:
            hint = f" ({param.description})" if param.nullable and param.description else ""
            raise _fail(name, f"Missing required parameter '{name}'{hint}.")
        elif param.default is not None or param.name in given:
            checked[param.name] = param.default
    return checked


# The params every list takes (docs/api.md, Conventions): bounded so that the row offset
# (page - 1) * per_page still fits the database's integers.
def page_params(max_per_page: int = 100) -> tuple[Param, Param]:
    return (Param("page", Integer(minimum=1, maximum=MAX_INT // max_per_page), default=1,
                  description="the page, from 1"),
            Param("per_page", Integer(minimum=1, maximum=max_per_page), default=min(20, max_per_page),
                  description=f"items per page, at most {max_per_page}"))


ID = Integer(minimum=1)
PAGING = page_params()


# --- result schemas: plain JSON Schema, open to more members than they name ------------------------

INT = {"type": "integer"}
TEXT = {"type": "string"}
BOOL = {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
OBJECT = {"type": "object"}
ANY: dict[str, Any] = {}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


def array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def one_of(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


def obj(optional: Sequence[str] = (), **members: dict[str, Any]) -> dict[str, Any]:
    """An object with these members, each required unless named in ``optional``; more may come."""
    return {"type": "object", "properties": members,
            "required": [name for name in members if name not in optional]}


def page_of(item: dict[str, Any], **more: dict[str, Any]) -> dict[str, Any]:
    """A list's answer (docs/api.md, Pages)."""
    return obj(items=array(item), page=INT, per_page=INT, total=INT, **more)
