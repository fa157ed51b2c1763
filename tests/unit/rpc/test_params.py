"""The param checks every JSON-RPC handler uses: values come back, bad ones are named."""
from __future__ import annotations

import pytest

from engine.errors import InvalidParamsError
from rpc.params import (MAX_INT, int_or_str, optional_dict, optional_int, optional_list, optional_one_of,
                        optional_str, page_params, reject_unknown, require_dict, require_int, require_list,
                        require_one_of, require_str)


def refusal(check, *args, **kwargs) -> InvalidParamsError:
    with pytest.raises(InvalidParamsError) as caught:
        check(*args, **kwargs)
    return caught.value


def test_require_int_returns_a_positive_integer():
    assert require_int({"instance_id": 17}, "instance_id") == 17


def test_require_int_names_a_missing_parameter():
    error = refusal(require_int, {}, "definition_id")

    assert error.message == "Missing required parameter 'definition_id'."
    assert error.rpc_data() == {"reason": "invalid_params", "param": "definition_id"}


def test_require_int_treats_null_as_missing():
    error = refusal(require_int, {"instance_id": None}, "instance_id")

    assert "Missing" in error.message


@pytest.mark.parametrize("value", [True, False, "7", 7.0, 7.5, [7], {"v": 7}])
def test_require_int_refuses_what_is_not_an_integer(value):
    error = refusal(require_int, {"instance_id": value}, "instance_id")

    assert error.message == "Parameter 'instance_id' must be an integer."


@pytest.mark.parametrize("value", [0, -1])
def test_require_int_refuses_ids_below_one(value):
    error = refusal(require_int, {"instance_id": value}, "instance_id")

    assert error.message == "Parameter 'instance_id' must be at least 1."


def test_require_int_refuses_ids_beyond_the_databases_64_bit_range():
    error = refusal(require_int, {"instance_id": MAX_INT + 1}, "instance_id")

    assert "'instance_id' must be at most" in error.message


def test_optional_int_gives_the_default_when_absent_or_null():
    assert optional_int({}, "page", 1) == 1
    assert optional_int({"page": None}, "page", 1) == 1


def test_optional_int_checks_its_bounds():
    assert optional_int({"n": 5}, "n", minimum=1, maximum=5) == 5
    low = refusal(optional_int, {"n": 0}, "n", minimum=1)
    high = refusal(optional_int, {"n": 6}, "n", maximum=5)

    assert low.message == "Parameter 'n' must be at least 1."
    assert high.message == "Parameter 'n' must be at most 5."


def test_require_str_returns_the_string():
    assert require_str({"text": "hello"}, "text") == "hello"


@pytest.mark.parametrize("value, fragment", [
    (5, "must be a string"), ("", "must not be empty"), ("abcdef", "at most 5 characters"),
    ("a\x00b", "NUL"), ("\ud800", "valid Unicode"),
])
def test_require_str_refuses_bad_strings_naming_the_parameter(value, fragment):
    error = refusal(require_str, {"text": value}, "text", max_len=5)

    assert "'text'" in error.message
    assert fragment in error.message


def test_require_str_may_allow_an_empty_string():
    assert require_str({"text": ""}, "text", allow_empty=True) == ""


def test_optional_str_gives_the_default_when_absent_and_checks_when_present():
    assert optional_str({}, "name", "x") == "x"
    error = refusal(optional_str, {"name": 3}, "name")

    assert error.message == "Parameter 'name' must be a string."


def test_require_dict_and_optional_dict():
    assert require_dict({"result": {"a": 1}}, "result") == {"a": 1}
    assert optional_dict({}, "variables") is None
    assert optional_dict({"variables": None}, "variables") is None
    error = refusal(optional_dict, {"variables": [1]}, "variables")

    assert error.message == "Parameter 'variables' must be an object."


def test_require_list_and_optional_list():
    assert require_list({"permissions": ["a"]}, "permissions") == ["a"]
    assert optional_list({}, "permissions") is None
    error = refusal(require_list, {"permissions": "a"}, "permissions")

    assert error.message == "Parameter 'permissions' must be an array."


def test_require_one_of_accepts_a_choice_and_lists_the_choices_otherwise():
    assert require_one_of({"type": "telegram"}, "type", ("telegram", "viber")) == "telegram"
    error = refusal(require_one_of, {"type": "fax"}, "type", ("telegram", "viber"))

    assert error.message == "Parameter 'type' must be one of 'telegram', 'viber'."


def test_require_one_of_refuses_a_non_string_without_crashing_on_unhashable_values():
    error = refusal(require_one_of, {"type": ["telegram"]}, "type", {"telegram"})

    assert "'type'" in error.message


def test_optional_one_of_gives_the_default_when_absent():
    assert optional_one_of({}, "status", ("running",)) is None
    assert optional_one_of({"status": "running"}, "status", ("running",)) == "running"


@pytest.mark.parametrize("value", [4, "invoice"])
def test_int_or_str_accepts_an_id_or_a_code(value):
    assert int_or_str({"definition_id": value}, "definition_id") == value


@pytest.mark.parametrize("value, fragment", [
    (True, "must be an integer or a string"), (4.0, "must be an integer or a string"),
    (0, "at least 1"), ("", "must not be empty"), (None, "Missing required parameter"),
])
def test_int_or_str_refuses_everything_else(value, fragment):
    error = refusal(int_or_str, {"definition_id": value}, "definition_id")

    assert "'definition_id'" in error.message
    assert fragment in error.message


def test_reject_unknown_passes_known_params():
    reject_unknown({"instance_id": 1}, {"instance_id", "variables"})


def test_reject_unknown_names_every_unknown_param():
    error = refusal(reject_unknown, {"instance_id": 1, "zeta": 2, "alpha": 3}, {"instance_id"})

    assert error.message == "Unknown parameters 'alpha', 'zeta'."
    assert error.rpc_data()["params"] == ["alpha", "zeta"]


def test_reject_unknown_uses_the_singular_for_one_param():
    error = refusal(reject_unknown, {"x": 1}, set())

    assert error.message == "Unknown parameter 'x'."


def test_page_params_default_to_the_first_page_of_twenty():
    assert page_params({}) == (1, 20)


def test_page_params_return_what_was_asked():
    assert page_params({"page": 3, "per_page": 100}) == (3, 100)


@pytest.mark.parametrize("params, name", [
    ({"per_page": 101}, "per_page"), ({"per_page": 0}, "per_page"),
    ({"page": 0}, "page"), ({"page": "2"}, "page"), ({"page": MAX_INT}, "page"),
])
def test_page_params_refuse_out_of_range_pages_naming_them(params, name):
    error = refusal(page_params, params)

    assert f"'{name}'" in error.message


def test_page_params_respect_a_smaller_maximum():
    error = refusal(page_params, {"per_page": 11}, max_per_page=10)

    assert error.message == "Parameter 'per_page' must be at most 10."
