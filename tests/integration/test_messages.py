"""Messages and signals between instances through the real server, on SQLite and PostgreSQL: a
two-pool collaboration exchanging messages (each pool its own definition, conversations kept
apart by a correlation key), correlation by key across two instances (BPMN correlation properties
and Camunda-style variables, from message.correlate and from a BPMN throw), a signal reaching
three instances and starting a process, and what becomes of a message nobody waits for."""
from __future__ import annotations

import pytest

from tests.harness import RpcError
from tests.integration.test_bpmn_runtime import entry, start, status_when, waiting

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n<bpmn:definitions '
          'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">\n')


def definitions(body: str, code: str) -> str:
    """A file whose message, signal and process names carry the test's code (the tenant is shared)."""
    return (HEADER + body + "</bpmn:definitions>").replace("CODE", code)


COLLABORATION = """
  <bpmn:collaboration id="c">
    <bpmn:participant id="p_shop" processRef="CODE_shop" /><bpmn:participant id="p_store" processRef="CODE_store" />
    <bpmn:messageFlow id="mf1" sourceRef="order" targetRef="on_order" />
    <bpmn:messageFlow id="mf2" sourceRef="shipped" targetRef="wait_shipped" />
  </bpmn:collaboration>
  <bpmn:message id="M_order" name="CODE order placed" /><bpmn:message id="M_shipped" name="CODE order shipped" />
  <bpmn:correlationProperty id="order_id" name="order">
    <bpmn:correlationPropertyRetrievalExpression messageRef="M_order">
      <bpmn:formalExpression>order_id</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>
    <bpmn:correlationPropertyRetrievalExpression messageRef="M_shipped">
      <bpmn:formalExpression>order_id</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>
  </bpmn:correlationProperty>
  <bpmn:process id="CODE_shop" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="order" />
    <bpmn:sendTask id="order" messageRef="M_order" /><bpmn:sequenceFlow id="a2" sourceRef="order" targetRef="wait_shipped" />
    <bpmn:receiveTask id="wait_shipped" messageRef="M_shipped" />
    <bpmn:sequenceFlow id="a3" sourceRef="wait_shipped" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
  <bpmn:process id="CODE_store" isExecutable="true">
    <bpmn:startEvent id="on_order"><bpmn:messageEventDefinition messageRef="M_order" /></bpmn:startEvent>
    <bpmn:sequenceFlow id="b1" sourceRef="on_order" targetRef="pack" />
    <bpmn:scriptTask id="pack"><bpmn:script>parcel = "parcel-" + str(order_id)</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="b2" sourceRef="pack" targetRef="shipped" />
    <bpmn:endEvent id="shipped"><bpmn:messageEventDefinition messageRef="M_shipped" /></bpmn:endEvent>
  </bpmn:process>
"""


def test_a_two_pool_collaboration_deploys_as_two_definitions_and_its_pools_exchange_messages(api, unique_code):
    code = unique_code.replace("-", "_")
    deployed = api.deploy(definitions(COLLABORATION, code))
    assert [d["code"] for d in deployed["definitions"]] == [f"{code}_shop", f"{code}_store"]
    assert deployed["definition_id"] == deployed["definitions"][0]["definition_id"]
    stored = api.call("definition.get", definition_id=deployed["definitions"][1]["definition_id"])
    assert stored["start_events"] == [{"element_id": "on_order", "trigger": "message", "channel": None,
                                       "message": f"{code} order placed", "default": True}]
    shops = [start(api, f"{code}_shop", order_id=n) for n in (1, 2)]  # two conversations at once
    for order_id, shop in zip((1, 2), shops):
        done = api.wait_for(shop)
        assert done["status"] == "completed"
        assert done["variables"] == {"order_id": order_id, "parcel": f"parcel-{order_id}"}  # its own reply
    stores = api.call("process.list", definition_id=deployed["definitions"][1]["definition_id"])["items"]
    assert sorted(s["status"] for s in stores) == ["completed", "completed"]
    with pytest.raises(RpcError) as one_code:
        api.deploy(definitions(COLLABORATION, code), code="x")
    assert one_code.value.reason == "invalid_params" and "Leave 'code' out" in one_code.value.message


WAITER = """
  <bpmn:message id="M_pay" name="CODE payment" /><bpmn:message id="M_hello" name="CODE hello" />
  <bpmn:correlationProperty id="order_id">
    <bpmn:correlationPropertyRetrievalExpression messageRef="M_pay">
      <bpmn:formalExpression>order_id</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>
  </bpmn:correlationProperty>
  <bpmn:process id="waiter" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="split" />
    <bpmn:parallelGateway id="split" />
    <bpmn:sequenceFlow id="a2" sourceRef="split" targetRef="paid" /><bpmn:sequenceFlow id="a3" sourceRef="split" targetRef="hello" />
    <bpmn:intermediateCatchEvent id="paid"><bpmn:messageEventDefinition messageRef="M_pay" /></bpmn:intermediateCatchEvent>
    <bpmn:intermediateCatchEvent id="hello"><bpmn:messageEventDefinition messageRef="M_hello" /></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="a4" sourceRef="paid" targetRef="join" /><bpmn:sequenceFlow id="a5" sourceRef="hello" targetRef="join" />
    <bpmn:parallelGateway id="join" /><bpmn:sequenceFlow id="a6" sourceRef="join" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
"""
PAYER = """
  <bpmn:message id="M_pay" name="CODE payment" />
  <bpmn:correlationProperty id="order_id">
    <bpmn:correlationPropertyRetrievalExpression messageRef="M_pay">
      <bpmn:formalExpression>paid_for</bpmn:formalExpression></bpmn:correlationPropertyRetrievalExpression>
  </bpmn:correlationProperty>
  <bpmn:process id="payer" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="pay" />
    <bpmn:intermediateThrowEvent id="pay"><bpmn:messageEventDefinition messageRef="M_pay" /></bpmn:intermediateThrowEvent>
    <bpmn:sequenceFlow id="a2" sourceRef="pay" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
"""


def test_correlation_by_key_reaches_only_the_instance_it_names(api, other_api, unique_code):
    api.deploy(definitions(WAITER, unique_code), code=unique_code)
    api.deploy(definitions(PAYER, unique_code), code=unique_code + "-payer")
    first, second = start(api, unique_code, order_id=1, customer="ann"), start(api, unique_code, order_id=2, customer="bob")
    status = waiting(api, second, "paid", "hello")
    assert entry(status, "paid") == {"element_id": "paid", "kind": "intermediateCatchEvent",
                                     "message": f"{unique_code} payment", "correlation": {"order_id": 2}}
    waiting(api, first, "paid", "hello")
    # From outside, by the correlation property:
    reached = api.call("message.correlate", name=f"{unique_code} payment", correlation={"order_id": 2},
                       variables={"amount": 20})
    assert reached == {"message": f"{unique_code} payment", "reached": [second], "started": []}
    # ... and Camunda's way, by a variable the instance has:
    assert api.call("message.correlate", name=f"{unique_code} hello", correlation={"customer": "bob"})["reached"] == [second]
    done = api.wait_for(second)
    assert done["status"] == "completed" and done["variables"]["amount"] == 20
    # From a BPMN throw in another process, its property read from the thrower's variables:
    start(api, unique_code + "-payer", paid_for=1, amount=10)
    status_when(api, first, lambda s: "paid" not in {e["element_id"] for e in s["waiting_for"]}, "payment")
    # Nothing matches: a conflict, nothing changes; another tenant reaches nothing of ours.
    for caller, correlation in ((api, {"customer": "zed"}), (other_api, {"customer": "ann"})):
        with pytest.raises(RpcError) as nobody:
            caller.call("message.correlate", name=f"{unique_code} hello", correlation=correlation)
        assert nobody.value.reason == "conflict" and "No instance waits for the message" in nobody.value.message
    api.call("message.correlate", name=f"{unique_code} hello", correlation={"customer": "ann"})
    done = api.wait_for(first)
    assert done["status"] == "completed" and done["variables"]["amount"] == 10  # the payer's


def test_a_message_that_matches_several_instances_needs_all(api, unique_code):
    api.deploy(definitions(WAITER, unique_code), code=unique_code)
    ids = [start(api, unique_code, order_id=n) for n in (5, 6)]
    for instance_id in ids:
        waiting(api, instance_id, "hello")
    with pytest.raises(RpcError) as several:
        api.call("message.correlate", name=f"{unique_code} hello")
    assert several.value.reason == "conflict" and "matches 2 waiting instances" in several.value.message
    assert sorted(api.call("message.correlate", name=f"{unique_code} hello", all=True)["reached"]) == ids
    api.wait_until_idle()
    for instance_id in ids:  # the hello branch went on; each still waits for its payment
        waits = {e["element_id"] for e in api.call("process.status", instance_id=instance_id)["waiting_for"]}
        assert "paid" in waits and "hello" not in waits


UNHEARD = """
  <bpmn:message id="M_lost" name="CODE nobody listens" />
  <bpmn:process id="thrower" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="tell" />
    <bpmn:intermediateThrowEvent id="tell"><bpmn:extensionElements><camunda:properties>
      <camunda:property name="undelivered" value="POLICY" /></camunda:properties></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="M_lost" /></bpmn:intermediateThrowEvent>
    <bpmn:sequenceFlow id="a2" sourceRef="tell" targetRef="later" />
    <bpmn:userTask id="later" /><bpmn:sequenceFlow id="a3" sourceRef="later" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
"""


def test_a_message_nobody_waits_for_fails_its_thrower_at_the_element_unless_the_model_drops_it(api, unique_code):
    api.deploy(definitions(UNHEARD.replace("POLICY", "fail"), unique_code), code=unique_code)
    failed = api.wait_for(start(api, unique_code))
    assert failed["status"] == "failed"
    assert failed["error"] == {"element_id": "tell", "message": f"The message '{unique_code} nobody listens' thrown at "
                               "'tell' reached no waiting instance and started no process; deploy its receiver, or "
                               "give the element the property undelivered = drop."}
    api.deploy(definitions(UNHEARD.replace("POLICY", "drop"), unique_code), code=unique_code)
    dropped = start(api, unique_code)
    waiting(api, dropped, "later")
    api.wait_until_idle()
    assert api.call("process.status", instance_id=dropped)["status"] == "running"


SIGNALS = """
  <bpmn:signal id="S_alarm" name="CODE alarm" />
  <bpmn:process id="listener" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="work" />
    <bpmn:userTask id="work" /><bpmn:sequenceFlow id="a2" sourceRef="work" targetRef="e" /><bpmn:endEvent id="e" />
    <bpmn:boundaryEvent id="alarm" attachedToRef="work"><bpmn:signalEventDefinition signalRef="S_alarm" />
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="a3" sourceRef="alarm" targetRef="evacuated" /><bpmn:endEvent id="evacuated" />
  </bpmn:process>
"""
SIGNAL_START = """
  <bpmn:signal id="S_alarm" name="CODE alarm" />
  <bpmn:process id="responder" isExecutable="true">
    <bpmn:startEvent id="on_alarm"><bpmn:signalEventDefinition signalRef="S_alarm" /></bpmn:startEvent>
    <bpmn:sequenceFlow id="a1" sourceRef="on_alarm" targetRef="go" />
    <bpmn:userTask id="go" /><bpmn:sequenceFlow id="a2" sourceRef="go" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
"""
SIGNAL_THROW = """
  <bpmn:signal id="S_alarm" name="CODE alarm" />
  <bpmn:process id="siren" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="a1" sourceRef="s" targetRef="e" />
    <bpmn:endEvent id="e"><bpmn:signalEventDefinition signalRef="S_alarm" /></bpmn:endEvent>
  </bpmn:process>
"""


def test_a_signal_reaches_every_waiting_instance_and_starts_its_processes(api, other_api, unique_code):
    api.deploy(definitions(SIGNALS, unique_code), code=unique_code)
    responder = api.deploy(definitions(SIGNAL_START, unique_code), code=unique_code + "-responder")["definition_id"]
    ids = [start(api, unique_code, n=n) for n in range(3)]
    for instance_id in ids:
        status = waiting(api, instance_id, "alarm")
        assert entry(status, "alarm") == {"element_id": "alarm", "kind": "boundaryEvent", "signal": f"{unique_code} alarm"}
    assert other_api.call("signal.broadcast", name=f"{unique_code} alarm")["reached"] == []  # not our tenant's
    answer = api.call("signal.broadcast", name=f"{unique_code} alarm", variables={"level": 3})
    assert sorted(answer["reached"]) == ids and len(answer["started"]) == 1
    for instance_id in ids:
        done = api.wait_for(instance_id)
        assert done["status"] == "completed" and done["variables"]["level"] == 3
    started = waiting(api, answer["started"][0], "go")
    assert started["definition_id"] == responder and started["variables"] == {"level": 3}
    # A BPMN signal end event broadcasts the same way, with its instance's variables.
    later = start(api, unique_code, n=9)
    waiting(api, later, "alarm")
    api.deploy(definitions(SIGNAL_THROW, unique_code), code=unique_code + "-siren")
    start(api, unique_code + "-siren", level=5)
    assert api.wait_for(later)["variables"]["level"] == 5
