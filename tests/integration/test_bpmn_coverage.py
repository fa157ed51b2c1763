"""The BPMN that real models use and Baton used to refuse, through the real server on SQLite and
PostgreSQL: BPMN errors and escalations at user tasks (task.bpmn_error, task.bpmn_escalation, a
headless task's callback), conditional boundary events, transactions with their cancel events,
multiple and parallel multiple start events, SpiffArena's pre- and post-scripts and Camunda's
input/output mapping on an external task, and a message throw with camunda:expression."""
from __future__ import annotations

import pytest
import requests

from tests.harness import RpcError
from tests.unit.bpmn.test_starts import definitions
from tests.unit.bpmn.test_transactions import BOOKING as TRANSACTION

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n<bpmn:definitions '
          'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" '
          'xmlns:spiffworkflow="http://spiffworkflow.org/bpmn/schema/1.0/core" id="d">\n')


def model(body: str, declarations: str = "") -> str:
    return HEADER + declarations + f'<bpmn:process id="p" isExecutable="true">{body}</bpmn:process></bpmn:definitions>'


def waiting_at(api, instance_id: int) -> list[str]:
    api.wait_until_idle()
    return sorted(entry["element_id"] for entry in api.call("process.status", instance_id=instance_id)["waiting_for"])


def open_task(api, instance_id: int, element_id: str) -> dict:
    return next(t for t in api.call("task.list", instance_id=instance_id, status="in_progress")["items"]
                if t["element_id"] == element_id)


INVOICE = model("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="pay" />
  <bpmn:userTask id="pay" name="Pay invoice"><bpmn:extensionElements><camunda:properties>
    <camunda:property name="crm_webhook" value="CRM" /></camunda:properties></bpmn:extensionElements></bpmn:userTask>
  <bpmn:sequenceFlow id="f2" sourceRef="pay" targetRef="paid" /><bpmn:endEvent id="paid" />
  <bpmn:boundaryEvent id="unclear" attachedToRef="pay"><bpmn:errorEventDefinition errorRef="E" /></bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="unclear" targetRef="archive" />
  <bpmn:userTask id="archive" /><bpmn:sequenceFlow id="f4" sourceRef="archive" targetRef="archived" />
  <bpmn:endEvent id="archived" />
  <bpmn:boundaryEvent id="suspicious" attachedToRef="pay" cancelActivity="false">
    <bpmn:escalationEventDefinition escalationRef="X" /></bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f5" sourceRef="suspicious" targetRef="inform" />
  <bpmn:userTask id="inform" /><bpmn:sequenceFlow id="f6" sourceRef="inform" targetRef="informed" />
  <bpmn:endEvent id="informed" />""", '<bpmn:error id="E" errorCode="invoice-error" />'
                                    '<bpmn:escalation id="X" escalationCode="invoice-escalate" />')


@pytest.fixture
def invoice(api, unique_code, receiver):
    api.deploy(INVOICE.replace("CRM", receiver.url), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"amount": 70})["instance_id"]
    assert waiting_at(api, instance_id) == ["pay", "suspicious", "unclear"]
    return instance_id


def test_an_escalation_at_a_user_task_runs_its_non_interrupting_boundary_beside_it(api, invoice):
    task = open_task(api, invoice, "pay")

    raised = api.call("task.bpmn_escalation", task_id=task["task_id"], escalation_code="invoice-escalate",
                      variables={"reason": "new sender"})

    assert raised == {"task_id": task["task_id"], "status": "in_progress", "instance_id": invoice}
    assert waiting_at(api, invoice) == ["inform", "pay", "unclear"]
    assert open_task(api, invoice, "inform")["variables"]["reason"] == "new sender"


def test_a_bpmn_error_at_a_user_task_ends_it_and_its_error_boundary_path_runs(api, invoice):
    task = open_task(api, invoice, "pay")

    ended = api.call("task.bpmn_error", task_id=task["task_id"], error_code="invoice-error",
                     message="no amount on it", variables={"checked": True})

    assert ended == {"task_id": task["task_id"], "status": "cancelled", "instance_id": invoice}
    assert waiting_at(api, invoice) == ["archive"]
    row = api.call("task.list", task_id=task["task_id"])["items"][0]
    assert (row["status"], row["result"]) == ("cancelled", {"bpmn_error": "invoice-error", "message": "no amount on it"})
    variables = open_task(api, invoice, "archive")["variables"]
    assert variables["checked"] is True and variables["errorMessage"] == "no amount on it"
    with pytest.raises(RpcError) as again:
        api.call("task.complete", task_id=task["task_id"])
    assert again.value.reason == "conflict"


def test_a_code_no_boundary_catches_is_invalid_params_naming_the_task_and_changes_nothing(api, invoice):
    task = open_task(api, invoice, "pay")

    for method, params in (("task.bpmn_error", {"error_code": "typo"}),
                           ("task.bpmn_escalation", {"escalation_code": "invoice-error"})):
        with pytest.raises(RpcError) as refused:
            api.call(method, task_id=task["task_id"], **params)
        assert refused.value.reason == "invalid_params"
        assert refused.value.message.startswith(f"Task {task['task_id']} ('pay') has no ")
    assert waiting_at(api, invoice) == ["pay", "suspicious", "unclear"]
    assert open_task(api, invoice, "pay")["status"] == "in_progress"


def test_a_headless_tasks_callback_may_end_it_with_a_bpmn_error(server, api, invoice, receiver):
    announced = receiver.wait_for(1)[0].json()
    url, token = announced["callback_url"], announced["callback_token"]

    wrong = requests.post(url, json={"bpmn_error": {"error_code": "typo"}}, headers={"X-Callback-Token": token},
                          timeout=10)
    both = requests.post(url, json={"result": {}, "bpmn_error": {"error_code": "invoice-error"}},
                         headers={"X-Callback-Token": token}, timeout=10)
    ended = requests.post(url, json={"bpmn_error": {"error_code": "invoice-error", "variables": {"via": "crm"}}},
                          headers={"X-Callback-Token": token}, timeout=10)

    assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "invalid_params")
    assert both.status_code == 400 and "not both" in both.json()["error"]["message"]
    assert ended.status_code == 200 and ended.json()["status"] == "cancelled"
    assert waiting_at(api, invoice) == ["archive"]
    assert open_task(api, invoice, "archive")["variables"]["via"] == "crm"


WATCHED = model("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="order" />
  <bpmn:subProcess id="order">
    <bpmn:startEvent id="os" /><bpmn:sequenceFlow id="o1" sourceRef="os" targetRef="invoiced" />
    <bpmn:intermediateCatchEvent id="invoiced"><bpmn:messageEventDefinition messageRef="M" /></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="o2" sourceRef="invoiced" targetRef="ship" />
    <bpmn:userTask id="ship" /><bpmn:sequenceFlow id="o3" sourceRef="ship" targetRef="oe" /><bpmn:endEvent id="oe" />
  </bpmn:subProcess>
  <bpmn:sequenceFlow id="f2" sourceRef="order" targetRef="done" /><bpmn:endEvent id="done" />
  <bpmn:boundaryEvent id="archivable" attachedToRef="order">
    <bpmn:conditionalEventDefinition><bpmn:condition>${invoiceId != null}</bpmn:condition></bpmn:conditionalEventDefinition>
  </bpmn:boundaryEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="archivable" targetRef="archive" />
  <bpmn:userTask id="archive" /><bpmn:sequenceFlow id="f4" sourceRef="archive" targetRef="gone" />
  <bpmn:endEvent id="gone" />""", '<bpmn:message id="M" name="invoice" />')


def test_a_conditional_boundary_fires_once_a_variable_inside_its_subprocess_makes_it_true(api, unique_code):
    api.deploy(WATCHED, code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    api.wait_until_idle()
    waiting = api.call("process.status", instance_id=instance_id)["waiting_for"]
    assert {"element_id": "archivable", "kind": "boundaryEvent", "condition": "(invoiceId != None)"} in waiting

    api.call("process.message", instance_id=instance_id, message="invoice", variables={"invoiceId": "INV-3"})

    assert waiting_at(api, instance_id) == ["archive"]
    assert open_task(api, instance_id, "archive")["variables"]["invoiceId"] == "INV-3"


BOOKING = definitions(TRANSACTION)  # a reservation in a transaction, cancelled unless paid


@pytest.mark.parametrize("paid, waiting_after", [(True, []), (False, ["refund"])])
def test_a_transaction_completes_or_is_cancelled_by_its_cancel_end_event(api, unique_code, paid, waiting_after):
    api.deploy(BOOKING, code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code)["instance_id"]
    assert waiting_at(api, instance_id) == ["booking", "on_cancel", "reserve"]
    kinds = {e["element_id"]: e["kind"] for e in api.call("process.status", instance_id=instance_id)["waiting_for"]}
    assert kinds["booking"] == "transaction"

    api.call("task.complete", task_id=open_task(api, instance_id, "reserve")["task_id"], result={"paid": paid})

    assert waiting_at(api, instance_id) == waiting_after
    assert api.call("process.status", instance_id=instance_id)["status"] == ("completed" if paid else "running")


STARTS = model("""
  <bpmn:startEvent id="either" PARALLEL><bpmn:messageEventDefinition messageRef="M" />
    <bpmn:signalEventDefinition signalRef="S" /></bpmn:startEvent>
  <bpmn:sequenceFlow id="f1" sourceRef="either" targetRef="look" />
  <bpmn:userTask id="look" /><bpmn:sequenceFlow id="f2" sourceRef="look" targetRef="e" /><bpmn:endEvent id="e" />""",
               '<bpmn:message id="M" name="NAME-order" /><bpmn:signal id="S" name="NAME-alarm" />')


def test_a_multiple_start_event_starts_an_instance_by_its_message_or_its_signal(api, unique_code):
    deployed = api.deploy(STARTS.replace("PARALLEL", "").replace("NAME", unique_code), code=unique_code)
    by_message = api.call("message.correlate", name=f"{unique_code}-order", variables={"via": "message"})
    by_signal = api.call("signal.broadcast", name=f"{unique_code}-alarm", variables={"via": "signal"})
    [start] = api.call("definition.get", definition_id=deployed["definition_id"])["start_events"]

    assert start == {"element_id": "either", "trigger": "multiple", "channel": None,
                     "messages": [f"{unique_code}-order"], "signals": [f"{unique_code}-alarm"], "parallel": False,
                     "default": True}
    for answer, via in ((by_message, "message"), (by_signal, "signal")):
        [instance_id] = answer["started"]
        assert waiting_at(api, instance_id) == ["look"]
        assert open_task(api, instance_id, "look")["variables"] == {"via": via}


def test_a_parallel_multiple_start_event_waits_for_all_of_its_triggers_in_one_instance(api, unique_code):
    api.deploy(STARTS.replace("PARALLEL", 'parallelMultiple="true"').replace("NAME", unique_code), code=unique_code)
    [instance_id] = api.call("message.correlate", name=f"{unique_code}-order", variables={"order": 7})["started"]
    api.wait_until_idle()
    [waiting] = api.call("process.status", instance_id=instance_id)["waiting_for"]
    assert waiting == {"element_id": "either", "kind": "startEvent", "signal": f"{unique_code}-alarm"}

    signalled = api.call("signal.broadcast", name=f"{unique_code}-alarm", variables={"level": 2})

    assert signalled == {"signal": f"{unique_code}-alarm", "reached": [instance_id], "started": []}
    assert waiting_at(api, instance_id) == ["look"]
    assert open_task(api, instance_id, "look")["variables"] == {"order": 7, "level": 2}


WORKED = model("""
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="ship" />
  <bpmn:serviceTask id="ship" camunda:type="external" camunda:topic="TOPIC"><bpmn:extensionElements>
    <spiffworkflow:preScript>weight = amount / 10</spiffworkflow:preScript>
    <spiffworkflow:postScript>shipped = tracking is not None</spiffworkflow:postScript>
    <camunda:inputOutput><camunda:inputParameter name="parcel">${weight * 2}</camunda:inputParameter>
      <camunda:outputParameter name="tracking">${label}</camunda:outputParameter></camunda:inputOutput>
  </bpmn:extensionElements></bpmn:serviceTask>
  <bpmn:sequenceFlow id="f2" sourceRef="ship" targetRef="notify" />
  <bpmn:intermediateThrowEvent id="notify">
    <bpmn:messageEventDefinition messageRef="M" camunda:expression="${mailer.send(order)}" />
  </bpmn:intermediateThrowEvent>
  <bpmn:sequenceFlow id="f3" sourceRef="notify" targetRef="e" /><bpmn:endEvent id="e" />""",
                '<bpmn:message id="M" name="shipped" />')


def fetch(api, topic: str) -> dict:
    [task] = api.call("external.fetch_and_lock", worker_id="w", topics=[{"name": topic, "lock_duration_ms": 60_000}],
                      wait_ms=5_000)["tasks"]
    return task


def test_pre_and_post_scripts_and_an_io_mapping_wrap_an_external_task_and_a_message_throw_waits_for_its_worker(
        api, unique_code):
    api.deploy(WORKED.replace("TOPIC", unique_code), code=unique_code)
    instance_id = api.call("process.start", definition_id=unique_code, variables={"amount": 50})["instance_id"]

    shipping = fetch(api, unique_code)
    api.call("external.complete", task_id=shipping["task_id"], worker_id="w", variables={"label": "TRK-9"})
    notifying = fetch(api, "${mailer.send(order)}")
    api.call("external.complete", task_id=notifying["task_id"], worker_id="w")
    done = api.wait_for(instance_id)

    assert shipping["variables"] == {"amount": 50, "weight": 5.0, "parcel": 10.0}
    assert notifying["element_id"] == "notify" and notifying["variables"]["tracking"] == "TRK-9"
    assert done["status"] == "completed"
    assert done["variables"] == {"amount": 50, "weight": 5.0, "label": "TRK-9", "tracking": "TRK-9", "shipped": True}
