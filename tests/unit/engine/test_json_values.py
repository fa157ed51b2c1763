"""engine.json_values: the limits of a JSON value Baton keeps, the strict door reader, the tolerant row reader."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import json_values
from engine.json_values import MAX_DEPTH, JsonSyntaxError, JsonValueError
from tests import fuzz_cases


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("body, where, words", [
    ('{"v": 1e400}', "body.v", "number too large"),
    ('{"v": [1, -1e400]}', "body.v[1]", "number too large"),
    ('{"a": {"b": NaN}}', "body.a.b", "NaN is not a JSON number"),
    ('{"a": Infinity}', "body.a", "Infinity is not a JSON number"),
    ('{"a": -Infinity}', "body.a", "-Infinity is not a JSON number"),
    ('{"a": 9223372036854775808}', "body.a", "integer out of range"),
    ('{"a": "x\\ud800"}', "body.a", "lone surrogate"),
    ('{"\\udfff": 1}', "body.\\udfff", "key is not valid Unicode"),
])
def test_values_outside_the_limits_are_named_by_their_path(body, where, words):
    with pytest.raises(JsonValueError) as caught:
        json_values.parse_checked(body.encode())
    assert caught.value.where == where
    assert words in caught.value.problem


def test_nesting_is_limited_at_the_documented_depth_even_past_what_the_parser_takes():
    assert json_values.parse_checked(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    for levels in (MAX_DEPTH + 1, 500, 5000, 100_000):
        with pytest.raises(JsonValueError) as caught:
            json_values.parse_checked(nested(levels))
        assert f"deeper than {MAX_DEPTH} levels" in caught.value.problem


def test_limits_within_range_pass_unchanged():
    body = '{"big": 9223372036854775807, "small": -9223372036854775807, "f": 1.7e308, "t": "Zoë \\ud83d\\ude00"}'
    assert json_values.parse_checked(body) == json.loads(body)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff{}", b"{'a': 1}", b"1" * 5000])
def test_text_that_is_not_json_is_a_syntax_error(body):
    with pytest.raises(JsonSyntaxError):
        json_values.parse(body)


def test_a_long_path_is_shortened_in_the_message():
    found = json_values.problem({"d": json.loads(nested(200))}, "variables")
    assert found is not None and len(found.where) < 220 and found.where.startswith("variables.d[0]")


def test_stored_rows_read_back_with_markers_instead_of_failing():
    assert json_values.read_stored('{"v": Infinity, "w": NaN, "ok": 1}') == {
        "v": "[unreadable value: Infinity is not a JSON number]",
        "w": "[unreadable value: NaN is not a JSON number]", "ok": 1}
    deep = '{"ok": 2, "deep": ' + nested(5000) + "}"
    read = json_values.read_stored(deep.encode())
    assert read["ok"] == 2
    assert json_values.problem(read, "row") is None
    assert "[unreadable value: nested deeper than 64 levels]" in json.dumps(read)


def test_readable_replaces_only_the_bad_parts():
    value = {"a": [1, float("inf")], "b": "ok", "c": 2**70, "\ud800": "x\udc00"}
    shown = json_values.readable(value)
    assert shown["a"][0] == 1 and shown["b"] == "ok"
    assert shown["a"][1].startswith("[unreadable value: number too large")
    assert shown["c"].startswith("[unreadable value: integer out of range")
    assert json_values.problem(shown, "x") is None
    assert value["a"][1] == float("inf")  # the original is left alone


def test_the_stored_serializer_refuses_nan():
    with pytest.raises(ValueError):
        json_values.write_stored({"v": float("nan")})
    assert json_values.write_stored({"v": 1}) == '{"v": 1}'


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(value=st.one_of(fuzz_cases.hostile_values, st.lists(fuzz_cases.hostile_values, max_size=30),
                       st.integers(55, 75).map(lambda n: json.loads("[" * n + "1" + "]" * n)),
                       st.integers(1, 40).map(lambda n: [{"a": json.loads("[" * 60 + "]" * 60)}] * n),
                       st.dictionaries(fuzz_cases.texts, fuzz_cases.hostile_values, max_size=30)))
def test_the_fast_check_agrees_with_the_walk_that_names_the_place(value):
    """``problem`` skips the walk when the value's JSON text is surely clean: never wrongly."""
    value = json.loads(json.dumps(value)) if not isinstance(value, fuzz_cases.Raw) else str(value)
    walked = json_values._walk(value, "v", 0)
    assert (json_values.problem(value, "v") is None) == (walked is None)
    try:
        text = json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        return
    if walked is None:
        assert json_values.parse_checked(text) == value or value != value
