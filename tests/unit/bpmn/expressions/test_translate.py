"""bpmn.expressions: JUEL and FEEL translated at deploy into sandboxed Python, or refused naming why.

Translations are run in the real sandbox (``Sandbox.evaluate``), so each case checks the meaning a
Camunda user expects, not only the text produced.
"""
from __future__ import annotations

import pytest

from bpmn.expressions import translate
from engine.sandbox import Sandbox


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox(timeout_s=5, memory_mb=256, hosts=1)
    yield box
    box.close()


ORDER = {"amount": 150, "status": "gold", "approved": True, "customer": {"name": "Ada", "tier": 2,
                                                                        "tags": ["vip"]},
         "items": [], "note": "", "missing": None, "score": 7, "count": 0}


@pytest.mark.parametrize("text, expected", [
    ("${approved}", True),
    ("${!approved}", False),
    ("#{not approved}", False),
    ("${amount > 100}", True),
    ("${amount gt 100 && status eq 'gold'}", True),
    ("${amount lt 100 || status == \"gold\"}", True),
    ("${amount le 150 and amount ge 150}", True),
    ("${status ne 'silver'}", True),
    ("${customer.name == 'Ada'}", True),
    ("${customer['tier'] >= 2}", True),
    ("${customer.tags[0]}", "vip"),
    ("${empty items}", True),
    ("${empty note}", True),
    ("${empty missing}", True),
    ("${empty customer}", False),
    ("${empty count}", False),  # 0 is not empty in JUEL
    ("${not empty customer.tags}", True),
    ("${missing == null}", True),
    ("${score > 5 ? 'good' : 'bad'}", "good"),
    ("${amount div 2}", 75.0),
    ("${amount mod 7}", 3),
    ("${-score + 10}", 3),
    ("${1 < 2 == true}", True),
    ("${(1 + 2) * 3}", 9),
    ("${'it\\'s'}", "it's"),
    ("${1.5e2}", 150.0),
    ("= amount > 100", True),
    ("= status = \"gold\" and approved", True),
    ("= status != \"gold\" or not(approved)", False),
    ("= not(amount > 100)", False),
    ("= customer.tier = 2", True),
    ("= amount between 100 and 200", True),
    ("= if score > 5 then \"good\" else \"bad\"", "bad" if False else "good"),
    ("= missing = null", True),
    ("=amount>100", True),
    ("amount > 100 and status == 'gold'", True),  # Python passes through
    # Camunda Spin's JSON reading methods: a JSON variable is a map or a list here
    ('${customer.prop("tier").numberValue() >= 2}', True),
    ('${customer.prop("name").stringValue()}', "Ada"),
    ("${customer.prop('tags').elements()[0]}", "vip"),
    ('${customer.hasProp("tier") && !customer.hasProp("age")}', True),
    ("${approved.boolValue()}", True),
    ('${customer.prop("tier").value() + 1}', 3),
])
def test_a_translation_means_what_camunda_means(sandbox, text, expected):
    translation = translate(text)
    assert translation.problem is None, translation.problem
    assert sandbox.evaluate(translation.python, ORDER) == expected


@pytest.mark.parametrize("text, dialect", [
    ("${a}", "JUEL"), ("#{a}", "JUEL"), ("= a", "FEEL"), ("a", None), ("  ${a}  ", "JUEL")])
def test_the_dialect_is_recognised_by_its_marker(text, dialect):
    assert translate(text).dialect == dialect


@pytest.mark.parametrize("text, problem", [
    ('${customer.prop("age", 1) >= 21}', "')' is missing to close prop( (position 22)"),
    ('${customer.numberValue(1)}', "')' is missing after numberValue(, which takes no argument"),
    ('= customer.prop("age")', "the method call prop(...)"),  # Spin is Camunda 7's JUEL only
    ("${execution.getVariable('x')}", "the method call getVariable(...)"),
    ("${execution.processInstanceId}", "'execution' is an object of Camunda's engine"),
    ("${task.name}", "'task' is an object of Camunda's engine"),
    ("${myBean.check(order)}", "the method call check(...)"),
    ("${now()}", "the function call now(...)"),
    ("= count(items) > 0", "the function call count(...)"),
    ("= x in [1..5]", "FEEL 'in' (position 5)"),
    ("= date(\"2020-01-01\")", "the function call date(...)"),
    ("= some x in xs satisfies x > 1", "'some' at position 3 is not translated"),
    ("${x = 1}", "'=' at position 5 assigns in JUEL"),
    ("${a}${b}", "only one ${...}"),
    ("Total: ${amount}", "only one ${...}"),
    ("${amount", "only one ${...}"),
    ("${a ==}", "the expression ends too early"),
    ("${a b}", "'b' at position 5 is not expected there"),
    ("${(a}", "')' is missing to close a parenthesis"),
    ("${'open}", "the text starting at position 3 has no closing quote"),
    ("${'\\q'}", "the escape '\\q' at position 4 is not known"),
    ("${a @ b}", "the character '@' at position 5"),
    ("${class}", "the variable name 'class' cannot be used"),
    ("${__import__}", "the variable name '__import__' cannot be used"),
    ("${a$b}", "the variable name 'a$b' cannot be used"),
    ("${[1, 2]}", "the list at position 3"),
    ("${a instanceof b}", "'instanceof' at position 5 is not expected there"),
    ("${9 ** 9}", "'*' at position 6 is not expected there"),
])
def test_what_is_outside_the_subset_is_refused_naming_the_construct(text, problem):
    translation = translate(text)
    assert translation.python is None
    assert problem in translation.problem


def test_hostile_nesting_is_refused_not_a_crash():
    deep = "${" + "(" * 2000 + "a" + ")" * 2000 + "}"
    assert "nested more than" in translate(deep).problem
    negations = "${" + "!" * 2000 + "a}"
    assert "nested more than" in translate(negations).problem
    assert "longer than" in translate("${" + "a + " * 5000 + "a}").problem


def test_dunder_keys_stay_keys_of_the_data(sandbox):
    translation = translate("${order.__class__}")
    assert translation.python == "order['__class__']"
    with pytest.raises(Exception) as caught:
        sandbox.evaluate(translation.python, {"order": {"total": 1}})
    assert "__class__" in str(caught.value)  # a missing key, not the dict's class
    assert sandbox.evaluate(translation.python, {"order": {"__class__": "x"}}) == "x"


def test_comparisons_stay_left_associative_as_in_juel(sandbox):
    # JUEL: (3 > 2) > 1 is true > 1, which Python would chain as 3 > 2 and 2 > 1.
    translation = translate("${3 > 2 > 1}")
    assert translation.python == "((3 > 2) > 1)"
    assert sandbox.evaluate(translation.python, {}) is False


def test_strings_come_out_as_python_literals_whatever_they_hold(sandbox):
    for text in ["a'b", 'a"b', "back\\slash", "new\nline", "${x}", "ünï"]:
        escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        translation = translate('= "' + escaped + '"')
        assert translation.problem is None
        assert sandbox.evaluate(translation.python, {}) == text
