"""Camunda Forms over real HTTP, on SQLite and PostgreSQL: forms given to definition.deploy, named by
a user task's camunda:formRef or formKey, returned by task.list as form_schema, and task.complete
checking the result against the form on the server (nothing stored when it breaks it)."""
from __future__ import annotations

import json

import pytest

from tests.harness import RpcError, bpmn
from tests.integration.test_operator_work import open_tasks

GOOD = {"customer": "ACME", "amount": 120, "currency": "USD", "channel": "email", "urgent": True,
        "tags": ["travel"], "paid_on": "2026-11-20", "iban": "DE89370400440532013000", "note": "ok",
        "address": {"city": "Berlin"}}


def invoice_form(form_id: str = "invoice", **changes) -> str:
    schema = json.loads(bpmn("invoice.form"))
    schema.update(id=form_id, **changes)
    return json.dumps(schema)


@pytest.fixture
def invoice(api, unique_code):
    deployed = api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=unique_code, forms=[invoice_form()])
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    return deployed, instance_id, open_tasks(api, instance_id)[0]


def test_task_list_returns_the_form_the_task_names(invoice):
    deployed, _instance_id, task = invoice
    assert deployed["forms"][0]["id"] == "invoice" and deployed["forms"][0]["version"] >= 1
    assert task["form_schema"]["id"] == "invoice"
    assert [c.get("key") for c in task["form_schema"]["components"]][1:3] == ["customer", "amount"]


@pytest.mark.parametrize("change, field, phrase", [
    ({"customer": None}, "customer", "is required"),
    ({"customer": "A"}, "customer", "at least 2 characters"),
    ({"customer": 5}, "customer", "must be text"),
    ({"amount": 0}, "amount", "at least 1"),
    ({"amount": 1001}, "amount", "at most 1000"),
    ({"amount": "12"}, "amount", "must be a number"),
    ({"currency": "GBP"}, "currency", "one of: EUR, USD"),
    ({"channel": "fax"}, "channel", "one of: post, email"),
    ({"urgent": "yes"}, "urgent", "true or false"),
    ({"tags": "travel"}, "tags", "must be a list"),
    ({"tags": ["food"]}, "tags", "one of: travel, hardware"),
    ({"paid_on": "20.11.2026"}, "paid_on", "ISO 8601 date"),
    ({"iban": "12345"}, "iban", "match the pattern"),
    ({"note": "x" * 201}, "note", "at most 200 characters"),
    ({"address": {}}, "address.city", "is required"),
    ({"extra": 1}, "extra", "Unknown form field"),
])
def test_a_result_that_breaks_the_form_is_refused_naming_the_field_and_nothing_is_stored(api, invoice, change,
                                                                                         field, phrase):
    _deployed, instance_id, task = invoice
    result = {key: value for key, value in {**GOOD, **change}.items() if value is not None}
    with pytest.raises(RpcError) as caught:
        api.call("task.complete", task_id=task["task_id"], result=result)
    assert caught.value.reason == "invalid_params" and caught.value.data["field"] == field
    assert phrase in caught.value.message
    after = api.call("task.list", task_id=task["task_id"])["items"][0]
    assert after["status"] == "in_progress" and after["result"] is None
    assert api.call("process.status", instance_id=instance_id)["status"] == "running"


def test_a_result_the_form_accepts_completes_the_task_with_defaults_filled_in(api, invoice):
    _deployed, instance_id, task = invoice
    result = {key: value for key, value in GOOD.items() if key != "currency"}
    api.call("task.complete", task_id=task["task_id"], result=result)
    status = api.wait_for(instance_id)
    assert status["status"] == "completed"
    assert status["variables"]["currency"] == "EUR" and status["variables"]["address"] == {"city": "Berlin"}


def test_form_key_and_latest_binding_pick_the_newest_version(api, unique_code):
    form_id = f"f-{unique_code}"
    old = invoice_form(form_id, components=[{"type": "textfield", "key": "first", "id": "a"}])
    api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=unique_code,
             forms=[invoice_form("invoice"), old])
    new = invoice_form(form_id, components=[{"type": "number", "key": "second", "id": "b"}])
    api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=unique_code + "x",
             forms=[invoice_form("invoice"), new])
    latest = bpmn("invoice_form.bpmn").replace('camunda:formRef="invoice" camunda:formRefBinding="deployment"',
                                               f'camunda:formRef="{form_id}"')
    api.deploy(latest, code=unique_code + "y")
    task = open_tasks(api, api.call("process.start", definition_id=unique_code + "y")["instance_id"])[0]
    assert [c["key"] for c in task["form_schema"]["components"]] == ["second"]
    keyed = bpmn("invoice_form.bpmn").replace('camunda:formRef="invoice" camunda:formRefBinding="deployment"',
                                              f'camunda:formKey="camunda-forms:deployment:{form_id}"')
    api.call("definition.deploy", bpmn=keyed, code=unique_code + "z", forms=[old])
    task = open_tasks(api, api.call("process.start", definition_id=unique_code + "z")["instance_id"])[0]
    assert [c["key"] for c in task["form_schema"]["components"]] == ["first"]


@pytest.mark.parametrize("forms, element_id, phrase", [
    ([], "enter", "not among the forms of this deploy"),
    (["{not json"], None, "forms[0] is not JSON"),
    (['{"id": "invoice", "components": "none"}'], "invoice", "no 'components' list"),
    (['{"id": "invoice", "components": [{"type": "textfield", "label": "x"}]}'], "invoice", "has no 'key'"),
    (['{"id": "invoice", "components": [{"type": "number", "key": "a"}, {"type": "textfield", "key": "a"}]}'],
     "invoice", "used by two fields"),
    (['["a form"]'], None, "is a JSON object"),
])
def test_a_form_that_is_not_a_camunda_form_or_a_missing_form_refuses_the_deploy(api, unique_code, forms, element_id,
                                                                                  phrase):
    with pytest.raises(RpcError) as caught:
        api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=unique_code, forms=forms)
    assert caught.value.reason == "invalid_params"
    errors = caught.value.data["errors"]
    assert any(error["element_id"] == element_id and phrase in error["message"] for error in errors), errors
    assert api.call("definition.list", code=unique_code)["total"] == 0


def test_forms_param_is_checked(api, unique_code):
    for forms, phrase in ((["{}"] * 21, "at most 20"), ("x", "must be an array"), ([5], "must be a string")):
        with pytest.raises(RpcError) as caught:
            api.call("definition.deploy", bpmn=bpmn("invoice_form.bpmn"), code=unique_code, forms=forms)
        assert caught.value.reason == "invalid_params" and phrase in caught.value.message
    assert api.call("definition.list", code=unique_code)["total"] == 0
