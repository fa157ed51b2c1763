"""What other modelers write, through the real server on SQLite and PostgreSQL: JUEL (Camunda 7)
and FEEL (Camunda 8) gateway conditions, SpiffArena's timedelta timers, a Camunda cron timer
start, and a process with several start events, each trigger beginning at its own."""
from __future__ import annotations

import time

import pytest
import requests

from tests.harness import scheduled_timer_starts
from tests.integration.test_bpmn_runtime import at, start, waiting

HEADER = ('<?xml version="1.0" encoding="UTF-8"?>\n<bpmn:definitions '
          'xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" '
          'xmlns:camunda="http://camunda.org/schema/1.0/bpmn" id="d">\n')

GATEWAY = HEADER + """
  <bpmn:process id="route" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="gw" />
    <bpmn:exclusiveGateway id="gw" default="no" />
    <bpmn:sequenceFlow id="yes" sourceRef="gw" targetRef="approved">
      <bpmn:conditionExpression LANGUAGE>CONDITION</bpmn:conditionExpression></bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="no" sourceRef="gw" targetRef="rejected" />
    <bpmn:endEvent id="approved"><bpmn:extensionElements><camunda:properties>
      <camunda:property name="output_keys" value="amount" /></camunda:properties></bpmn:extensionElements></bpmn:endEvent>
    <bpmn:endEvent id="rejected" />
  </bpmn:process>
</bpmn:definitions>"""


def path_taken(api, instance_id: int) -> str:
    done = api.wait_for(instance_id)
    assert done["status"] == "completed", done
    return "approved" if list(done["variables"]) == ["amount"] else "rejected"


@pytest.mark.parametrize("language, condition", [
    ("", '${amount &gt; 100 &amp;&amp; customer.tier == "gold" &amp;&amp; !blocked}'),      # JUEL, Camunda 7
    ('language="juel"', "${amount gt 100 and customer.tier eq 'gold' and not blocked}"),
    ("", '= amount &gt; 100 and customer.tier = "gold" and not(blocked)'),                   # FEEL, Camunda 8
])
def test_juel_and_feel_gateway_conditions_route(api, unique_code, language, condition):
    api.deploy(GATEWAY.replace("LANGUAGE", language).replace("CONDITION", condition), code=unique_code)
    gold = {"tier": "gold"}
    assert path_taken(api, start(api, unique_code, amount=150, customer=gold, blocked=False)) == "approved"
    assert path_taken(api, start(api, unique_code, amount=150, customer=gold, blocked=True)) == "rejected"
    assert path_taken(api, start(api, unique_code, amount=50, customer=gold, blocked=False)) == "rejected"


TIMEDELTA = HEADER + """
  <bpmn:process id="pause" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="wait" />
    <bpmn:intermediateCatchEvent id="wait"><bpmn:timerEventDefinition>
      <bpmn:timeDuration>timedelta(seconds=seconds)</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
</bpmn:definitions>"""


def test_a_timedelta_timer_waits_as_long_as_it_says(api, unique_code):
    api.deploy(TIMEDELTA, code=unique_code)
    instance_id = start(api, unique_code, seconds=2)
    status = waiting(api, instance_id, "wait")
    [entry] = status["waiting_for"]
    waited = (at(entry["due_at"]) - at(status["started_at"])).total_seconds()
    assert 1.9 <= waited <= 2.5  # two seconds from when the timer was reached
    done = api.wait_for(instance_id, timeout=15)
    assert done["status"] == "completed" and at(done["completed_at"]) >= at(entry["due_at"])


CRON_START = HEADER + """
  <bpmn:process id="tick" isExecutable="true">
    <bpmn:startEvent id="every_second"><bpmn:timerEventDefinition>
      <bpmn:timeCycle>0/1 * * * * ?</bpmn:timeCycle></bpmn:timerEventDefinition></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="every_second" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
</bpmn:definitions>"""
QUIET = HEADER + """
  <bpmn:process id="tick" isExecutable="true">
    <bpmn:startEvent id="s" /><bpmn:sequenceFlow id="f1" sourceRef="s" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
</bpmn:definitions>"""


def test_a_cron_timer_start_starts_an_instance_at_each_of_its_times(api, unique_code, database_url):
    definition_id = api.deploy(CRON_START, code=unique_code)["definition_id"]
    deadline = time.monotonic() + 15
    while len(runs := api.call("process.list", definition_id=definition_id)["items"]) < 3:
        assert time.monotonic() < deadline, f"three runs of a once-a-second cron: {runs}"
        time.sleep(0.1)
    api.deploy(QUIET, code=unique_code)  # a version without the timer ends the schedule
    started = sorted(at(run["started_at"]) for run in runs)
    gaps = [(b - a).total_seconds() for a, b in zip(started, started[1:])]
    assert all(0.5 < gap < 1.9 for gap in gaps), gaps
    # The dropped schedule starts nothing more: no timer start of the code is left to run.
    assert scheduled_timer_starts(database_url, unique_code) == []


STARTS = HEADER + """
  <bpmn:message id="M_order" name="CODE order" />
  <bpmn:process id="entry" isExecutable="true">
    <bpmn:startEvent id="by_hand" /><bpmn:sequenceFlow id="f1" sourceRef="by_hand" targetRef="hand" />
    <bpmn:startEvent id="by_hook"><bpmn:extensionElements><camunda:properties>
      <camunda:property name="trigger" value="webhook" /></camunda:properties></bpmn:extensionElements>
    </bpmn:startEvent><bpmn:sequenceFlow id="f2" sourceRef="by_hook" targetRef="hook" />
    <bpmn:startEvent id="on_order"><bpmn:messageEventDefinition messageRef="M_order" /></bpmn:startEvent>
    <bpmn:sequenceFlow id="f3" sourceRef="on_order" targetRef="order" />
    <bpmn:scriptTask id="hand"><bpmn:script>came = "hand"</bpmn:script></bpmn:scriptTask>
    <bpmn:scriptTask id="hook"><bpmn:script>came = "hook"</bpmn:script></bpmn:scriptTask>
    <bpmn:scriptTask id="order"><bpmn:script>came = "order " + str(number)</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="f4" sourceRef="hand" targetRef="e" /><bpmn:sequenceFlow id="f5" sourceRef="hook" targetRef="e" />
    <bpmn:sequenceFlow id="f6" sourceRef="order" targetRef="e" /><bpmn:endEvent id="e" />
  </bpmn:process>
</bpmn:definitions>"""


def test_several_start_events_each_begin_the_instance_at_their_own(api, server, unique_code):
    deployed = api.deploy(STARTS.replace("CODE", unique_code), code=unique_code)
    assert api.wait_for(start(api, unique_code))["variables"]["came"] == "hand"  # process.start: the default
    hook = requests.post(deployed["webhooks"][0]["url"], json={}, timeout=10).json()
    assert api.wait_for(hook["instance_id"])["variables"]["came"] == "hook"
    ordered = api.call("message.correlate", name=f"{unique_code} order", variables={"number": 7})
    assert ordered["reached"] == [] and len(ordered["started"]) == 1
    done = api.wait_for(ordered["started"][0])
    assert done["variables"]["came"] == "order 7" and done["definition_id"] == deployed["definition_id"]
