"""Scripts of assignments run in-process (``engine.sandbox.inline_scripts``) give exactly what a real
script host gives, or hand the script to the host: compared on chosen edge cases and on generated
scripts, against a host process of the real sandbox."""
from __future__ import annotations

import math
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ScriptError
from engine.sandbox import Sandbox, inline_scripts


@pytest.fixture(scope="module")
def sandbox():
    started = Sandbox(timeout_s=5, memory_mb=256, hosts=1)
    yield started
    started.close()


def host_answer(sandbox, script, variables):
    """What a host answers: ("ok", variables) or ("error", message)."""
    try:
        return "ok", sandbox.execute(script, variables)
    except ScriptError as exc:
        return "error", exc.message


def test_the_benchmark_script_runs_inline_with_the_hosts_answer(sandbox):
    script = 'total = int(amount) * 2\nlabel = "big" if total > 100 else "small"'
    variables = {"amount": 70, "_hidden": 1, "note": None}
    assert inline_scripts.plan(script) is not None
    assert inline_scripts.run(script, variables) == host_answer(sandbox, script, variables)[1] == {
        "amount": 70, "note": None, "total": 140, "label": "big", "_hidden": 1}


@pytest.mark.parametrize("script", [
    "for x in items:\n    n = x",           # a loop
    "items.append(3)",                        # a statement that is not an assignment (and mutates)
    "a, b = 1, 2",                            # unpacking
    "x += 1",                                 # in place: aliasing could differ
    "x = [i for i in items]",                 # a comprehension
    "x = f'{amount}'",                        # an f-string
    "x = d.key",                              # an attribute read (the evaluator reads dict keys so)
    "x = range(3)",                           # a builtin only the host has
    "x = (y := 3)",                           # an assignment expression
    "_x = 1",                                 # a hidden name
    "",                                       # nothing
])
def test_what_the_evaluator_may_not_compute_as_python_does_is_left_to_the_host(script):
    assert inline_scripts.plan(script) is None


@pytest.mark.parametrize("script, variables", [
    ("x = 1 / zero", {"zero": 0}),                            # an error: the host's words
    ("x = missing + 1", {}),                                  # an unknown name
    ("x = int(text)", {"text": "abc"}),                       # a ValueError
    ("x = int(3)", {"int": 4}),                               # a variable shadows the builtin called
    ("x = d.upper()", {"d": {"upper": "not callable"}}),      # a method the value lacks
    ("x = amount * 1.0", {"amount": math.nan}),               # NaN: no JSON carries it
    ("x = 'a' * 300000", {}),                                 # past the evaluator's budget, not the host's
])
def test_a_script_the_evaluator_cannot_answer_as_a_host_goes_to_the_host(sandbox, script, variables):
    assert inline_scripts.plan(script) is not None
    assert inline_scripts.run(script, variables) is None
    host_answer(sandbox, script, variables)  # the host answers it (value or error), as before


# -- generated scripts ------------------------------------------------------------------------------

NAMES = ("a", "b", "s", "items", "d", "flag")
VARIABLES = {"a": 7, "b": -2.5, "s": "Hello", "items": [3, 1, 2], "d": {"k": 1, "upper": 2}, "flag": True}
LEAVES = st.sampled_from([*NAMES, "0", "1", "2", "-1", "2.5", "'x'", "''", "None", "True", "[]", "{}",
                          "'k'", "[1, 'a']", "(1, 2)"])
BINARY = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", ">", "<=", ">=", "and", "or",
                          "in", "not in", "&", "|", "^"])
CALLS = st.sampled_from(["len", "str", "int", "float", "bool", "abs", "min", "max", "round", "sorted", "any",
                         "all", "sum", "list", "tuple", "set"])
METHODS = st.sampled_from(["upper()", "lower()", "split()", "get('k')", "keys()", "count(1)", "index(1)",
                           "strip()", "startswith('H')"])


def expressions(depth: int = 2):
    if depth == 0:
        return LEAVES
    inner = expressions(depth - 1)
    return st.one_of(
        LEAVES,
        st.tuples(inner, BINARY, inner).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "not "]), inner).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(CALLS, inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(inner, METHODS).map(lambda t: f"({t[0]}).{t[1]}"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]})[{t[1]}]"),
        st.tuples(inner, inner, inner).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(inner, inner).map(lambda t: f"[{t[0]}, {t[1]}]"),
        st.tuples(inner, inner).map(lambda t: f"({t[0]})[{t[1]}:]"),
    )


SCRIPTS = st.lists(st.tuples(st.sampled_from(["a", "x", "y", "s"]), expressions()), min_size=1, max_size=3).map(
    lambda steps: "\n".join(f"{name} = {value}" for name, value in steps))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=SCRIPTS)
def test_a_generated_script_inline_gives_what_the_host_gives(sandbox, script):
    assert inline_scripts.plan(script) is not None
    inline = inline_scripts.run(script, VARIABLES)
    kind, answer = host_answer(sandbox, script, VARIABLES)
    if inline is not None:
        assert (kind, answer) == ("ok", inline), script


def test_the_generated_scripts_mostly_run_inline(sandbox):
    """The comparison above is not vacuous: most generated scripts take the inline path."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # .example() is meant for exploring; here it only samples
        examples = [SCRIPTS.example() for _ in range(200)]
    inline = sum(inline_scripts.run(script, VARIABLES) is not None for script in examples)
    assert inline >= 40, inline
