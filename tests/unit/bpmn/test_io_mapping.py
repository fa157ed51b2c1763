"""camunda:inputOutput on script and service tasks: inputs are evaluated when the task becomes
ready and are local to it, outputs are set for the process when it completes; values are text,
${...} JUEL, lists, maps or Python scripts; other script languages are refused; in memory."""
from __future__ import annotations

from SpiffWorkflow.util.task import TaskState

import bpmn
from bpmn import deploy
from tests.unit.bpmn.refusals import refusal
from tests.unit.bpmn.test_starts import definitions, workflow_of

MAPPED = definitions("""<bpmn:process id="p" isExecutable="true">
  <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="price" />
  <bpmn:scriptTask id="price"><bpmn:extensionElements><camunda:inputOutput>
      <camunda:inputParameter name="net">${order.amount}</camunda:inputParameter>
      <camunda:inputParameter name="rate">0.2</camunda:inputParameter>
      <camunda:inputParameter name="order_id"><camunda:script scriptFormat="python">order["id"] * 10</camunda:script>
      </camunda:inputParameter>
      <camunda:inputParameter name="tags"><camunda:list><camunda:value>new</camunda:value>
        <camunda:value>${order.channel}</camunda:value></camunda:list></camunda:inputParameter>
      <camunda:inputParameter name="meta"><camunda:map><camunda:entry key="by">price</camunda:entry></camunda:map>
      </camunda:inputParameter>
      <camunda:outputParameter name="gross">${total}</camunda:outputParameter>
      <camunda:outputParameter name="labels">${tags}</camunda:outputParameter>
    </camunda:inputOutput></bpmn:extensionElements>
    <bpmn:script>total = net * (1 + float(rate)); scratch = meta["by"]</bpmn:script></bpmn:scriptTask>
  <bpmn:sequenceFlow id="f2" sourceRef="price" targetRef="ship" />
  <bpmn:serviceTask id="ship" camunda:type="external" camunda:topic="shipping"><bpmn:extensionElements>
    <camunda:inputOutput><camunda:inputParameter name="weight">${gross / 10}</camunda:inputParameter>
      <camunda:outputParameter name="tracking">${label}</camunda:outputParameter></camunda:inputOutput>
  </bpmn:extensionElements></bpmn:serviceTask>
  <bpmn:sequenceFlow id="f3" sourceRef="ship" targetRef="e" /><bpmn:endEvent id="e" />
</bpmn:process>""")


def test_inputs_are_local_and_outputs_reach_the_process_around_a_script_task_and_an_external_task(script_engine):
    workflow = workflow_of(deploy.parse_definition(MAPPED), script_engine)
    workflow.get_tasks(state=TaskState.READY)[0].data.update(order={"amount": 100, "id": 7, "channel": "web"},
                                                            rate="kept")
    workflow.do_engine_steps()
    [waiting] = bpmn.waiting_external_tasks(workflow)

    assert waiting["variables"]["weight"] == 12.0  # the worker sees its input
    assert waiting["variables"]["gross"] == 120.0 and waiting["variables"]["labels"] == ["new", "web"]
    assert waiting["variables"]["rate"] == "kept"  # an input shadowed it; the process's value is back
    assert not {"net", "order_id", "tags", "meta"} & set(waiting["variables"])  # locals, gone
    assert waiting["variables"]["scratch"] == "price"  # what the script itself set goes on, as without a mapping
    bpmn.complete_external_task(workflow.get_tasks(state=TaskState.STARTED)[0], {"label": "TRK-1"})
    workflow.do_engine_steps()
    assert workflow.is_completed()
    assert workflow.last_task.data["tracking"] == "TRK-1" and "weight" not in workflow.last_task.data


def test_a_javascript_value_or_one_from_a_resource_is_refused_as_code_baton_does_not_run():
    javascript = refusal(MAPPED.replace('scriptFormat="python">order["id"] * 10',
                                        'scriptFormat="javascript">execution.getVariable("order")'))
    resource = refusal(MAPPED.replace('<camunda:script scriptFormat="python">order["id"] * 10</camunda:script>',
                                      '<camunda:script scriptFormat="groovy" resource="id.groovy" />'))

    assert javascript[0]["element_id"] == "price"
    assert javascript[0]["message"].startswith("scriptTask camunda:inputOutput with a javascript script "
                                               "(camunda:inputParameter 'order_id') is code Baton does not run")
    assert "loaded from 'id.groovy', which Baton does not run" in resource[0]["message"]


def test_a_mapping_elsewhere_than_on_script_and_service_tasks_stays_refused_saying_where_it_runs():
    on_user_task = MAPPED.replace('<bpmn:serviceTask id="ship" camunda:type="external" camunda:topic="shipping">',
                                  '<bpmn:userTask id="ship">').replace("</bpmn:serviceTask>", "</bpmn:userTask>")

    [error] = refusal(on_user_task)

    assert error["message"].startswith("userTask with camunda:inputOutput is not supported yet: Baton maps inputs "
                                       "and outputs of script and service tasks")
