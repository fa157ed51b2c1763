"""SpiffArena's preScript and postScript on every kind of task, script and service tasks included:
run in the sandbox when the task becomes ready and when it completes, in memory."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import workflow_of

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" '
          'xmlns:spiffworkflow="http://spiffworkflow.org/bpmn/schema/1.0/core" id="d">\n')


def scripts(pre: str, post: str) -> str:
    return (f"<bpmn:extensionElements><spiffworkflow:preScript>{pre}</spiffworkflow:preScript>"
            f"<spiffworkflow:postScript>{post}</spiffworkflow:postScript></bpmn:extensionElements>")


MODEL = HEADER + f"""<bpmn:process id="p" isExecutable="true">
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="calc" />
  <bpmn:scriptTask id="calc">{scripts("a = 1", "c = b + 1")}<bpmn:script>b = a + 1</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="calc" targetRef="bill" />
  <bpmn:serviceTask id="bill" camunda:type="external" camunda:topic="billing">{scripts("due = c * 10", "paid = receipt is not None")}
  </bpmn:serviceTask>
  <bpmn:sequenceFlow id="f3" sourceRef="bill" targetRef="e" /><bpmn:endEvent id="e" />
</bpmn:process></bpmn:definitions>"""


def test_pre_and_post_scripts_run_around_a_script_task_and_an_external_task(script_engine):
    workflow = workflow_of(deploy.parse_definition(MODEL), script_engine)
    workflow.do_engine_steps()
    [waiting] = bpmn.waiting_external_tasks(workflow)

    assert waiting["variables"] == {"a": 1, "b": 2, "c": 3, "due": 30}  # the worker sees the preScript's due
    bpmn.complete_external_task(workflow.get_task_from_id(workflow.get_tasks(state=TaskState.STARTED)[0].id),
                                {"receipt": "R-1"})
    workflow.do_engine_steps()
    assert workflow.is_completed() and workflow.last_task.data["paid"] is True


def test_a_post_script_that_cannot_run_is_refused_at_deploy():
    [error] = refusal(MODEL.replace("c = b + 1", "import os"))

    assert error["element_id"] == "calc"
    assert error["message"].startswith("scriptTask postScript cannot run: imports are not allowed")
