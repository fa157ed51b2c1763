"""definition.deploy/list/get over real HTTP, hostile uploads included: refused clearly, nothing stored."""
from __future__ import annotations

import pytest

from tests.harness import RpcError, bpmn

XXE = """<?xml version="1.0"?>
<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">
  <bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s" name="&x;"/></bpmn:process>
</bpmn:definitions>"""

LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">
  <bpmn:process id="p" isExecutable="true"><bpmn:startEvent id="s" name="&lol2;"/></bpmn:process>
</bpmn:definitions>"""

UNSUPPORTED = """<?xml version="1.0"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="s"/>
    <bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="script"/>
    <bpmn:scriptTask id="script"><bpmn:script>import os</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="f3" sourceRef="script" targetRef="e"/>
    <bpmn:endEvent id="e"/>
  </bpmn:process>
</bpmn:definitions>"""


def refusal(api, xml, code):
    with pytest.raises(RpcError) as caught:
        api.deploy(xml, code=code)
    assert (caught.value.code, caught.value.reason) == (-32602, "invalid_params")
    assert "Traceback" not in caught.value.message
    return caught.value.data["errors"]


def test_deploy_versions_and_get_returns_the_xml(api, unique_code):
    xml = bpmn("webhook_order.bpmn")
    first = api.deploy(xml, code=unique_code)
    second = api.deploy(xml, code=unique_code)
    assert (first["code"], first["version"], second["version"]) == (unique_code, 1, 2)
    got = api.call("definition.get", definition_id=second["definition_id"])
    assert got["bpmn"] == xml and got["version"] == 2 and got["process_id"] == "order"
    listed = api.call("definition.list", code=unique_code)
    assert [d["version"] for d in listed["items"]] == [2, 1] and listed["total"] == 2


def test_code_defaults_to_the_process_id(api):
    deployed = api.deploy(bpmn("wait_for_person.bpmn"))
    assert deployed["code"] == "wait_for_person"


@pytest.mark.parametrize("xml", [XXE, LAUGHS], ids=["xxe", "billion-laughs"])
def test_doctype_is_refused_and_nothing_is_stored(api, unique_code, xml):
    errors = refusal(api, xml, unique_code)
    assert "DOCTYPE" in errors[0]["message"]
    assert "root:" not in str(errors)
    assert api.call("definition.list", code=unique_code)["total"] == 0


def test_unsupported_elements_and_bad_scripts_are_all_reported_with_lines(api, unique_code):
    errors = refusal(api, UNSUPPORTED, unique_code)
    by_element = {e["element_id"]: e for e in errors}
    assert "signal" in by_element["wait"]["message"].lower()
    assert "import" in by_element["script"]["message"].lower()
    assert by_element["wait"]["line"] == 6 and by_element["script"]["line"] == 8


@pytest.mark.parametrize("xml, needle", [
    ("", "bpmn"),
    ("not xml at all", "line"),
    ("<a><b></a>", "line"),
    ("<root/>", "BPMN"),
    ('<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d"/>', "process"),
])
def test_garbage_uploads_are_refused_with_a_reason(api, unique_code, xml, needle):
    if xml == "":
        with pytest.raises(RpcError) as caught:
            api.deploy(xml, code=unique_code)
        assert caught.value.reason == "invalid_params" and needle in caught.value.message
        return
    errors = refusal(api, xml, unique_code)
    assert errors and needle.lower() in " ".join(e["message"] for e in errors).lower()


def test_channel_start_event_with_unknown_channel_is_refused(api, unique_code):
    xml = bpmn("wait_for_person.bpmn").replace(
        '<bpmn:startEvent id="start" />',
        '<bpmn:startEvent id="start"><bpmn:extensionElements><camunda:properties '
        'xmlns:camunda="http://camunda.org/schema/1.0/bpmn">'
        '<camunda:property name="trigger" value="webchat"/><camunda:property name="channel" value="site"/>'
        '</camunda:properties></bpmn:extensionElements></bpmn:startEvent>')
    [error] = refusal(api, xml, unique_code)
    assert error["element_id"] == "start" and "site" in error["message"]


@pytest.mark.parametrize("params, named", [
    ({"bpmn": 42}, "bpmn"),
    ({"bpmn": ["<x/>"]}, "bpmn"),
    ({"bpmn": bpmn("wait_for_person.bpmn"), "code": "has spaces"}, "code"),
    ({"bpmn": bpmn("wait_for_person.bpmn"), "code": 7}, "code"),
])
def test_bad_deploy_params_name_the_parameter(api, params, named):
    with pytest.raises(RpcError) as caught:
        api.call("definition.deploy", **params)
    assert caught.value.reason == "invalid_params" and named in caught.value.message


def test_an_upload_over_the_body_limit_is_413(api):
    response = api.post({"jsonrpc": "2.0", "method": "definition.deploy", "id": 1,
                         "params": {"bpmn": "<x>" + "a" * (1024 * 1024) + "</x>"}})
    assert response.status_code == 413
    assert response.json()["error"]["data"]["reason"] == "payload_too_large"


def test_deep_nesting_is_refused_without_crashing(api, unique_code):
    xml = ('<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">'
           + "<a>" * 5000 + "</a>" * 5000 + "</bpmn:definitions>")
    assert refusal(api, xml, unique_code)
    assert api.call("process.list")["page"] == 1  # still serving


def test_a_process_with_two_start_events_is_refused_naming_them(api, unique_code):
    xml = bpmn("wait_for_person.bpmn").replace(
        '<bpmn:startEvent id="start" />',
        '<bpmn:startEvent id="start" /><bpmn:startEvent id="second_start" />'
        '<bpmn:sequenceFlow id="f0" sourceRef="second_start" targetRef="review" />')
    errors = refusal(api, xml, unique_code)
    assert [e["element_id"] for e in errors] == ["second_start"]
    assert "start" in errors[0]["message"] and "'start'" in errors[0]["message"]
