"""The OpenRPC document of the real method table: valid under OpenRPC's own meta-schema (vendored in
tests/openrpc, no network), describing every method, and generated from the same declarations that
check a call's params, so that what it documents is what the server accepts and refuses."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT7

from engine.errors import InvalidParamsError
from rpc import openrpc
from rpc.methods import build_methods
from rpc.registry import MethodTable, RpcMethod
from rpc.schema import (ID, Choice, Flag, IdOrCode, Integer, JsonObject, ListOf, Param, Record, Text,
                        check_params)

VENDORED = Path(__file__).resolve().parents[2] / "openrpc"
METHODS = build_methods()


def meta_schema_validator() -> jsonschema.Draft7Validator:
    """OpenRPC's meta-schema, its JSON Schema meta-schema registered under the URL it refers to."""
    openrpc_schema = json.loads((VENDORED / "openrpc-meta-schema-1.14.9.json").read_text(encoding="utf-8"))
    json_schema = json.loads((VENDORED / "json-schema-tools-meta-schema-1.8.0.json").read_text(encoding="utf-8"))
    registry = Registry().with_resource("https://meta.json-schema.tools", DRAFT7.create_resource(json_schema))
    return jsonschema.Draft7Validator(openrpc_schema, registry=registry)


def document(methods: MethodTable = METHODS) -> dict[str, Any]:
    return openrpc.document(methods, version="0.1.0", url="http://127.0.0.1:5000/v1/rpc")


def example(schema: dict[str, Any]) -> Any:
    """A value the schema accepts, the smallest of its kind."""
    if "oneOf" in schema:
        return example(schema["oneOf"][0])
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "integer":
        return max(schema.get("minimum", 0), 0)
    if kind == "string":
        return "x" * max(schema.get("minLength", 0), 1)
    if kind == "boolean":
        return False
    if kind == "array":
        return [example(schema["items"]) for _ in range(schema.get("minItems", 0))]
    if kind == "object":
        members = schema.get("properties", {})
        return {name: example(members[name]) for name in schema.get("required", [])}
    raise AssertionError(f"no example for {schema}")


def test_the_document_is_valid_openrpc_1_3():
    described = document()
    errors = sorted(meta_schema_validator().iter_errors(described), key=str)

    assert not errors, errors[0]
    assert described["openrpc"].startswith("1.3.")


def test_the_meta_schema_refuses_a_broken_document():
    """The validator really checks (a param schema whose type is a number is no JSON Schema)."""
    described = document()
    described["methods"][0]["params"][0]["schema"] = {"type": 5}

    assert list(meta_schema_validator().iter_errors(described))


def test_every_method_of_the_table_is_described_once_with_declared_params_and_a_result():
    described = {method["name"]: method for method in document()["methods"]}

    assert list(described) == list(METHODS)
    for name, method in described.items():
        assert "x-params-undeclared" not in method, f"{name} checks its params itself: declare them (rpc.registry)"
        assert method["summary"] and method["result"]["schema"], name
        assert method["x-permission"] == METHODS[name].needs
        assert method["paramStructure"] == "by-name"


def test_every_param_and_result_schema_is_a_json_schema():
    for method in document()["methods"]:
        for param in method["params"]:
            jsonschema.Draft7Validator.check_schema(param["schema"])
        jsonschema.Draft7Validator.check_schema(method["result"]["schema"])


@pytest.mark.parametrize("name", list(METHODS))
def test_every_documented_param_is_accepted_with_a_value_its_schema_allows(name):
    method = METHODS[name]
    given = {param.name: example(param.schema()) for param in method.params}

    checked = check_params(method.params, given)

    assert set(checked) == set(given)


@pytest.mark.parametrize("name", [name for name in METHODS if METHODS[name].params])
def test_every_method_refuses_a_param_it_does_not_document(name):
    required = {param.name: example(param.schema()) for param in METHODS[name].params if param.required}

    with pytest.raises(InvalidParamsError) as refused:
        check_params(METHODS[name].params, {**required, "undocumented": 1})
    assert refused.value.data == {"params": ["undocumented"]}


def refusal(params, given) -> str:
    with pytest.raises(InvalidParamsError) as refused:
        check_params(params, given)
    return refused.value.message


@pytest.mark.parametrize("kind, bad, message", [
    (ID, 0, "Parameter 'p' must be at least 1."),
    (ID, True, "Parameter 'p' must be an integer."),
    (Integer(minimum=0, maximum=5), 6, "Parameter 'p' must be at most 5."),
    (Text(max_len=3), "abcd", "Parameter 'p' must be at most 3 characters long."),
    (Text(), "", "Parameter 'p' must not be empty."),
    (Choice(("a", "b")), "c", "Parameter 'p' must be one of 'a', 'b'."),
    (Flag(), "yes", "Parameter 'p' must be true or false."),
    (JsonObject(), [], "Parameter 'p' must be an object."),
    (IdOrCode(), 1.5, "Parameter 'p' must be an integer or a string."),
    (ListOf(Text(), max_items=1, noun="files"), ["a", "b"], "Parameter 'p' must hold at most 1 files."),
    (ListOf(Text()), ["a", 7], "Parameter 'p[1]' must be a string."),
    (Record((Param("name", Text(), required=True),)), {}, "Missing required parameter 'p.name'."),
    (Record((Param("name", Text(), required=True),)), {"name": "a", "x": 1}, "Unknown parameter 'p.x'."),
])
def test_each_kind_refuses_what_its_schema_refuses_naming_the_param(kind, bad, message):
    params = (Param("p", kind),)

    assert refusal(params, {"p": bad}) == message
    assert list(jsonschema.Draft7Validator(Param("p", kind).schema()).iter_errors(bad))


def test_null_counts_as_absent_and_the_default_fills_in():
    params = (Param("page", Integer(minimum=1), default=1), Param("status", Text()))

    assert check_params(params, {"page": None}) == {"page": 1}
    assert check_params(params, {}) == {"page": 1}
    assert check_params(params, {"status": None}) == {"page": 1, "status": None}


def test_a_nullable_param_tells_null_from_left_out():
    params = (Param("secret", Text(), nullable=True),)

    assert check_params(params, {"secret": None}) == {"secret": None}
    assert check_params(params, {}) == {}


def test_a_required_nullable_param_must_be_given_even_as_null():
    params = (Param("secret", Text(), required=True, nullable=True, description="null removes it"),)

    assert check_params(params, {"secret": None}) == {"secret": None}
    assert refusal(params, {}) == "Missing required parameter 'secret' (null removes it)."


def test_an_undeclared_method_is_published_so_that_the_table_test_names_it():
    table = MethodTable([RpcMethod("old.style", lambda ctx, params: params)])

    described = document(table)["methods"][0]

    assert described["x-params-undeclared"] is True and described["params"] == []
    assert not list(meta_schema_validator().iter_errors(document(table)))


def test_an_undeclared_method_gets_its_params_unchecked():
    method = RpcMethod("old.style", lambda ctx, params: params)

    assert method.call(None, {"anything": 1}) == {"anything": 1}


def test_docs_api_md_has_a_section_for_every_method():
    text = (Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text(encoding="utf-8")
    headings = {line.lstrip("#").strip().split(" ")[0] for line in text.splitlines() if line.startswith("###")}

    assert not [name for name in METHODS if name not in headings]
