"""Camunda models through the real server, on SQLite and PostgreSQL: a Camunda example deploys as
written, its JUEL gateway routes, its Java delegates wait as external tasks; a parallel
multi-instance over a missing collection fails at once at its element (issue 14's first defect:
before, a bare TypeError was retried five times over ~30 s)."""
from __future__ import annotations

import time
from pathlib import Path

from tests.integration.test_bpmn_runtime import open_task, start, waiting

CAMUNDA = Path(__file__).resolve().parents[1] / "corpus" / "camunda"
TWITTER = CAMUNDA / "spring-boot-starter/example-twitter/src/main/resources/TwitterDemoProcess.bpmn"


def test_a_camunda_example_routes_by_its_juel_gateway_and_waits_at_its_delegate_as_an_external_task(
        api, unique_code):
    api.deploy(TWITTER.read_text(), code=unique_code)
    for approved, external in ((True, "service_task_publish_on_twitter"),
                               (False, "service_task_send_rejection_notification")):
        instance_id = start(api, unique_code, content="Hello")
        task = open_task(api, instance_id, "user_task_review_tweet")
        api.call("task.complete", task_id=task["task_id"], result={"approved": approved})
        status = waiting(api, instance_id, external)
        assert status["status"] == "running"
        [entry] = [e for e in status["waiting_for"] if e["element_id"] == external]
        assert entry["kind"] == "serviceTask" and entry["topic"]  # an external task, by its topic
        assert status["variables"]["approved"] is approved
        assert api.call("process.cancel", instance_id=instance_id)["status"] == "cancelled"


MISSING_COLLECTION = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d">
  <bpmn:process id="p" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="each" />
    <bpmn:scriptTask id="each">
      <bpmn:multiInstanceLoopCharacteristics>
        <bpmn:loopDataInputRef>items</bpmn:loopDataInputRef><bpmn:inputDataItem id="item" />
      </bpmn:multiInstanceLoopCharacteristics>
      <bpmn:script>seen = item</bpmn:script>
    </bpmn:scriptTask>
    <bpmn:sequenceFlow id="f2" sourceRef="each" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""


def test_a_parallel_multi_instance_over_a_null_collection_fails_at_once_at_its_element(api, unique_code):
    api.deploy(MISSING_COLLECTION, code=unique_code)
    started = time.monotonic()
    instance_id = start(api, unique_code, items=None)
    done = api.wait_for(instance_id, timeout=10)
    assert time.monotonic() - started < 5  # no retries of an internal error
    assert done["status"] == "failed"
    assert done["error"] == {"element_id": "each",
                             "message": "The multi-instance collection 'items' must be a list or a dict; it is null."}
