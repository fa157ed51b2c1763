"""Every BPMN element Baton runs, end to end: deployed, started and driven through the JSON-RPC API
of a real server, on SQLite and PostgreSQL.

tests/unit/test_bpmn_elements.py runs the same ``cov_*`` fixtures in memory; here each one goes
through the job queue, the saved state, the task rows and ``waiting_for``. Short timers (PT0.1S)
are replaced by 1 s ones so the waiting state can be seen, and every timer is checked to fire
within ``TIMER_SLACK_S`` of its ``due_at``. ``rt_*`` fixtures are variants written for these tests.
"""
from __future__ import annotations

import concurrent.futures
import time
from datetime import datetime, timedelta, timezone

import pytest

from tests.harness import RpcError, bpmn, scheduled_timer_starts
from tests.receiver import Answer, Receiver

TIMER_SLACK_S = 1.5  # a timer must fire within this of its due time (loaded 2-core machine)
MS = timedelta(milliseconds=1)  # timestamps are rounded down to the millisecond


# -- helpers ----------------------------------------------------------------------------------------

def deploy(api, name: str, code: str, texts: dict[str, str] | None = None) -> int:
    """Deploy ``tests/bpmn/<name>.bpmn`` under ``code``, each key of ``texts`` replaced by its value;
    returns the definition id."""
    xml = bpmn(f"{name}.bpmn")
    for old, new in (texts or {}).items():
        assert old in xml, f"{old!r} not in {name}"
        xml = xml.replace(old, new)
    return api.deploy(xml, code=code)["definition_id"]


def start(api, code: str, **variables) -> int:
    return api.call("process.start", definition_id=code, variables=variables)["instance_id"]


def status_when(api, instance_id: int, predicate, what: str, timeout: float = 20.0) -> dict:
    """Poll ``process.status`` until ``predicate(status)`` holds."""
    deadline = time.monotonic() + timeout
    while True:
        status = api.call("process.status", instance_id=instance_id)
        if predicate(status):
            return status
        assert status["status"] == "running", f"instance {instance_id} ended while waiting for {what}: {status}"
        assert time.monotonic() < deadline, f"instance {instance_id}: no {what} after {timeout}s: {status}"
        time.sleep(0.02)


def waiting(api, instance_id: int, *element_ids: str, timeout: float = 20.0) -> dict:
    """The status once the instance waits at every one of ``element_ids``."""
    return status_when(api, instance_id,
                       lambda s: set(element_ids) <= {e["element_id"] for e in s["waiting_for"]},
                       f"wait at {element_ids}", timeout)


def entry(status: dict, element_id: str) -> dict:
    [found] = [e for e in status["waiting_for"] if e["element_id"] == element_id]
    return found


def tasks_of(api, instance_id: int) -> dict[str, dict]:
    items = api.call("task.list", instance_id=instance_id, per_page=100)["items"]
    return {t["element_id"]: t for t in items}


def open_task(api, instance_id: int, element_id: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        task = tasks_of(api, instance_id).get(element_id)
        if task is not None and task["status"] == "in_progress":
            return task
        assert time.monotonic() < deadline, f"no open task {element_id} for instance {instance_id}"
        time.sleep(0.02)


def at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def iso_ms(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def assert_fired_on_time(due_at: str, fired: datetime | str) -> None:
    fired = at(fired) if isinstance(fired, str) else fired
    late = (fired - at(due_at)).total_seconds()
    assert -MS.total_seconds() <= late <= TIMER_SLACK_S, f"due {due_at}, fired {fired.isoformat()}: {late:+.3f}s"


def assert_conflict(call) -> RpcError:
    with pytest.raises(RpcError) as caught:
        call()
    assert (caught.value.code, caught.value.reason) == (-32602, "conflict"), caught.value
    return caught.value


def with_timer(new: str, old: str = "PT0.1S") -> dict[str, str]:
    """``texts`` for ``deploy`` that give a fixture's timer another duration."""
    return {f">{old}<": f">{new}<"}


# -- timers -----------------------------------------------------------------------------------------

def test_an_intermediate_timer_waits_with_its_due_time_then_fires_on_time(api, unique_code):
    deploy(api, "cov_timer_catch", unique_code, texts=with_timer("PT1S"))
    instance_id = start(api, unique_code)
    status = waiting(api, instance_id, "wait")
    timer = entry(status, "wait")
    assert timer == {"element_id": "wait", "kind": "intermediateCatchEvent", "due_at": timer["due_at"]}
    due_after_start = (at(timer["due_at"]) - at(status["started_at"])).total_seconds()
    assert 1.0 - 0.001 <= due_after_start <= 1.0 + TIMER_SLACK_S
    assert status["variables"] == {}

    done = api.wait_for(instance_id, timeout=10)
    assert done["status"] == "completed" and done["variables"] == {"waited": True}
    assert_fired_on_time(timer["due_at"], done["completed_at"])


def test_a_timer_date_in_the_past_fires_at_once(api, unique_code):
    deploy(api, "cov_timer_date", unique_code)
    done = api.wait_for(start(api, unique_code, note="late"), timeout=10)
    assert done["status"] == "completed" and done["variables"] == {"note": "late"}
    assert (at(done["completed_at"]) - at(done["started_at"])).total_seconds() <= TIMER_SLACK_S


def test_a_timer_date_in_the_future_waits_until_that_date_exactly(api, unique_code):
    when = (utc_now() + timedelta(seconds=3)).replace(microsecond=0)  # 2 to 3 s ahead
    deploy(api, "cov_timer_date", unique_code,
           texts={"2020-01-01T00:00:00Z": when.strftime("%Y-%m-%dT%H:%M:%SZ")})
    instance_id = start(api, unique_code)
    status = waiting(api, instance_id, "until")
    assert entry(status, "until") == {"element_id": "until", "kind": "intermediateCatchEvent",
                                      "due_at": when.strftime("%Y-%m-%dT%H:%M:%S.000Z")}
    done = api.wait_for(instance_id, timeout=10)
    assert done["status"] == "completed"
    assert_fired_on_time(entry(status, "until")["due_at"], done["completed_at"])


def test_a_timer_start_cycle_starts_exactly_its_number_of_instances_a_cycle_apart(api, unique_code, database_url):
    deployed_at = utc_now()
    definition_id = deploy(api, "rt_timer_start_cycle", unique_code)  # R2/PT1S
    deadline = time.monotonic() + 10
    while True:
        items = api.call("process.list", definition_id=definition_id)["items"]
        if len(items) >= 2 and all(i["status"] == "completed" for i in items):
            break
        assert time.monotonic() < deadline, f"timer start cycle R2/PT1S: {items}"
        time.sleep(0.05)
    assert scheduled_timer_starts(database_url, unique_code) == []  # R2: no third run is left to start
    items = sorted(api.call("process.list", definition_id=definition_id)["items"], key=lambda i: i["instance_id"])
    assert [i["status"] for i in items] == ["completed", "completed"], items
    # A cycle's runs are due one and two intervals after the deploy: the schedule keeps to its due
    # times (as Camunda's cycles do), so a first run that starts late does not push the second.
    assert_fired_on_time(iso_ms(deployed_at + timedelta(seconds=1)), items[0]["started_at"])
    assert_fired_on_time(iso_ms(deployed_at + timedelta(seconds=2)), items[1]["started_at"])
    apart = (at(items[1]["started_at"]) - at(items[0]["started_at"])).total_seconds()
    assert 0.5 <= apart <= 1.0 + TIMER_SLACK_S, f"the second run started {apart:.3f}s after the first"
    for item in items:
        assert api.call("process.status", instance_id=item["instance_id"])["variables"] == {"reported": True}


def test_redeploying_a_timer_start_code_replaces_the_old_versions_schedule(api, unique_code, database_url):
    old_id = deploy(api, "rt_timer_start_cycle", unique_code, texts={">R2/PT1S<": ">R3/PT1S<"})
    deadline = time.monotonic() + 10
    while not (old_runs := api.call("process.list", definition_id=old_id)["items"]):
        assert time.monotonic() < deadline, "the old version's first run never started"
        time.sleep(0.02)
    new_id = deploy(api, "rt_timer_start_cycle", unique_code, texts={">R2/PT1S<": ">R1/PT1S<"})
    redeployed_after = (utc_now() - at(old_runs[0]["started_at"])).total_seconds()
    assert redeployed_after < 0.8, f"redeployed {redeployed_after:.2f}s after the first run: proves nothing"
    # The old version's remaining runs are gone with the redeploy: only the new version's one is kept.
    assert scheduled_timer_starts(database_url, unique_code) in ([(new_id, 1)], [])
    deadline = time.monotonic() + 10
    while not (new_runs := api.call("process.list", definition_id=new_id)["items"]):
        assert time.monotonic() < deadline, "the new schedule (R1/PT1S) never started its run"
        time.sleep(0.02)
    api.wait_until_idle()
    assert scheduled_timer_starts(database_url, unique_code) == []
    old_runs = api.call("process.list", definition_id=old_id)["items"]
    new_runs = api.call("process.list", definition_id=new_id)["items"]
    assert len(old_runs) == 1, f"the replaced schedule started more instances: {old_runs}"
    assert len(new_runs) == 1, f"the new schedule (R1/PT1S) should have started exactly one: {new_runs}"


# -- messages ---------------------------------------------------------------------------------------

def test_a_message_catch_waits_for_its_message_and_takes_its_variables(api, unique_code):
    deploy(api, "cov_message_catch", unique_code)
    instance_id = start(api, unique_code, due=100)
    status = waiting(api, instance_id, "paid")
    assert status["waiting_for"] == [{"element_id": "paid", "kind": "intermediateCatchEvent",
                                      "message": "payment_received"}]
    answer = api.call("process.message", instance_id=instance_id, message="payment_received",
                      variables={"amount": 30})
    assert answer == {"instance_id": instance_id, "delivered": True}
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"due": 100, "amount": 30, "balance": 70}


def test_a_message_the_instance_does_not_wait_for_is_a_conflict_and_changes_nothing(api, unique_code):
    deploy(api, "cov_message_catch", unique_code)
    instance_id = start(api, unique_code, due=100)
    before = waiting(api, instance_id, "paid")
    error = assert_conflict(lambda: api.call("process.message", instance_id=instance_id,
                                             message="payment_refunded", variables={"amount": 1}))
    assert "payment_refunded" in error.message
    api.wait_until_idle()
    after = api.call("process.status", instance_id=instance_id)
    assert (after["status"], after["waiting_for"], after["variables"]) == (
        "running", before["waiting_for"], {"due": 100})


def test_a_message_to_a_completed_instance_is_a_conflict(api, unique_code):
    deploy(api, "cov_message_catch", unique_code)
    instance_id = start(api, unique_code, due=10)
    waiting(api, instance_id, "paid")
    api.call("process.message", instance_id=instance_id, message="payment_received", variables={"amount": 10})
    assert api.wait_for(instance_id)["status"] == "completed"
    assert_conflict(lambda: api.call("process.message", instance_id=instance_id, message="payment_received",
                                     variables={"amount": 10}))
    assert api.call("process.status", instance_id=instance_id)["variables"]["balance"] == 0


def test_of_concurrent_messages_for_one_waiting_catch_exactly_one_is_delivered(api, unique_code):
    deploy(api, "cov_message_catch", unique_code)
    instance_id = start(api, unique_code, due=100)
    waiting(api, instance_id, "paid")

    def send(amount):
        client = type(api)(api.base_url, api.key)
        try:
            client.call("process.message", instance_id=instance_id, message="payment_received",
                        variables={"amount": amount})
            return amount
        except RpcError as exc:
            return exc.reason

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(send, range(1, 7)))
    delivered = [o for o in outcomes if isinstance(o, int)]
    # "delivered: true" for a message the instance then drops would be a lost message.
    assert len(delivered) == 1 and outcomes.count("conflict") == 5, outcomes
    done = api.wait_for(instance_id)
    assert done["variables"]["amount"] == delivered[0]


def test_a_receive_task_waits_for_its_message_named_by_id(api, unique_code):
    deploy(api, "cov_receive_task", unique_code)
    instance_id = start(api, unique_code)
    status = waiting(api, instance_id, "receive_contract")
    assert status["waiting_for"] == [{"element_id": "receive_contract", "kind": "receiveTask",
                                      "message": "Message_signed"}]
    api.call("process.message", instance_id=instance_id, message="Message_signed", variables={"signed_by": "Ada"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"signed_by": "Ada"}


# -- boundary events --------------------------------------------------------------------------------

def test_an_interrupting_timer_boundary_cancels_the_task_row_and_runs_the_escalation_path(api, unique_code):
    deploy(api, "cov_boundary_timer_interrupting", unique_code, texts=with_timer("PT1S"))
    instance_id = start(api, unique_code, order=7)
    task = open_task(api, instance_id, "approve")
    status = waiting(api, instance_id, "approve", "too_late")
    assert entry(status, "approve") == {"element_id": "approve", "kind": "userTask"}
    timer = entry(status, "too_late")
    assert timer == {"element_id": "too_late", "kind": "boundaryEvent", "due_at": timer["due_at"]}

    done = api.wait_for(instance_id, timeout=10)
    assert done["status"] == "completed"
    assert done["variables"] == {"order": 7, "escalated": True}
    assert "decision" not in done["variables"]
    assert_fired_on_time(timer["due_at"], done["completed_at"])
    [row] = api.call("task.list", instance_id=instance_id)["items"]
    assert (row["task_id"], row["status"]) == (task["task_id"], "cancelled") and row["completed_at"]
    assert_conflict(lambda: api.call("task.complete", task_id=task["task_id"], result={"decision": "approve"}))


def test_completing_the_task_before_an_interrupting_timer_takes_the_normal_path(api, unique_code):
    deploy(api, "cov_boundary_timer_interrupting", unique_code, texts=with_timer("PT1H"))
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "approve")
    assert "due_at" in entry(waiting(api, instance_id, "too_late"), "too_late")
    api.call("task.complete", task_id=task["task_id"], result={"decision": "approve"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"decision": "approve"}
    assert tasks_of(api, instance_id)["approve"]["status"] == "completed"


def test_a_non_interrupting_timer_boundary_runs_the_reminder_and_leaves_the_task_open(api, unique_code):
    deploy(api, "cov_boundary_timer_noninterrupting", unique_code, texts=with_timer("PT1S"))
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "approve")
    timer = entry(waiting(api, instance_id, "approve", "remind"), "remind")
    assert timer == {"element_id": "remind", "kind": "boundaryEvent", "due_at": timer["due_at"]}

    reminded = status_when(api, instance_id, lambda s: s["variables"].get("reminded"), "the reminder", timeout=10)
    assert_fired_on_time(timer["due_at"], utc_now())
    assert reminded["status"] == "running"
    assert reminded["waiting_for"] == [{"element_id": "approve", "kind": "userTask"}]
    still = tasks_of(api, instance_id)["approve"]
    assert (still["task_id"], still["status"]) == (task["task_id"], "in_progress")

    api.call("task.complete", task_id=task["task_id"], result={"decision": "approve"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"decision": "approve", "reminded": True}


def test_a_message_boundary_interrupts_the_task_with_the_messages_variables(api, unique_code):
    deploy(api, "cov_boundary_message", unique_code)
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "pack")
    status = waiting(api, instance_id, "pack", "cancelled")
    assert entry(status, "cancelled") == {"element_id": "cancelled", "kind": "boundaryEvent",
                                          "message": "order_cancelled"}
    api.call("process.message", instance_id=instance_id, message="order_cancelled",
             variables={"reason": "customer asked"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"reason": "customer asked", "status": "cancelled: customer asked"}
    row = tasks_of(api, instance_id)["pack"]
    assert (row["task_id"], row["status"]) == (task["task_id"], "cancelled")


@pytest.mark.parametrize(("quantity", "outcome"), [(5, "refunded, 3 missing"), (1, "shipped")])
def test_an_error_end_in_a_subprocess_is_caught_by_its_error_boundary_only_when_thrown(
        api, unique_code, quantity, outcome):
    deploy(api, "cov_error_boundary", unique_code)
    done = api.wait_for(start(api, unique_code, quantity=quantity, stock=2))
    assert done["status"] == "completed" and done["error"] is None
    assert done["variables"]["outcome"] == outcome


def test_an_escalation_reaches_the_non_interrupting_boundary_and_the_subprocess_goes_on(api, unique_code):
    deploy(api, "cov_escalation", unique_code)
    done = api.wait_for(start(api, unique_code))
    assert done["status"] == "completed"
    assert done["variables"] == {"packed": True, "sales_told": True}


def test_a_terminate_end_in_the_same_step_completes_with_no_open_task(api, unique_code):
    deploy(api, "cov_terminate", unique_code)
    instance_id = start(api, unique_code)
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"answer": "automatic"}
    assert [t for t in tasks_of(api, instance_id).values() if t["status"] == "in_progress"] == []


def test_a_terminate_end_cancels_the_open_task_row_of_the_parallel_branch(api, unique_code):
    deploy(api, "rt_terminate_later", unique_code)
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "ask_person")
    status = waiting(api, instance_id, "ask_person", "ready")
    assert entry(status, "ready") == {"element_id": "ready", "kind": "intermediateCatchEvent",
                                      "message": "auto_answer_ready"}
    api.call("process.message", instance_id=instance_id, message="auto_answer_ready", variables={"text": "hi"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"]["answer"] == "automatic: hi"
    row = tasks_of(api, instance_id)["ask_person"]
    assert (row["task_id"], row["status"]) == (task["task_id"], "cancelled") and row["completed_at"]


# -- subprocesses -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("quantity", "total"), [(10, 95.0), (2, 25)])
def test_an_embedded_subprocess_sees_and_returns_the_process_variables(api, unique_code, quantity, total):
    deploy(api, "cov_subprocess", unique_code)
    done = api.wait_for(start(api, unique_code, quantity=quantity, shipping=5))
    assert done["status"] == "completed" and done["variables"]["total"] == total


def test_an_error_event_subprocess_interrupts_the_process(api, unique_code):
    deploy(api, "cov_event_subprocess_error", unique_code)
    instance_id = start(api, unique_code, quantity=0)
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"]["rejected"] == "quantity must be positive"
    assert [t for t in tasks_of(api, instance_id).values() if t["status"] == "in_progress"] == []


def test_an_error_event_subprocess_that_never_starts_lets_the_process_finish_normally(api, unique_code):
    deploy(api, "cov_event_subprocess_error", unique_code)
    instance_id = start(api, unique_code, quantity=3)
    task = open_task(api, instance_id, "review")
    api.call("task.complete", task_id=task["task_id"], result={"ok": True})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and "rejected" not in done["variables"]
    assert done["variables"]["ok"] is True


def test_a_message_event_subprocess_cancels_both_task_rows_and_sees_the_process_variables(api, unique_code):
    deploy(api, "cov_event_subprocess_message", unique_code)
    instance_id = start(api, unique_code, number=7)
    credit = open_task(api, instance_id, "check_credit")
    identity = open_task(api, instance_id, "check_identity")
    status = waiting(api, instance_id, "check_credit", "check_identity", "withdrawn")
    assert entry(status, "withdrawn")["message"] == "application_withdrawn"
    assert status["variables"] == {"number": 7, "application": "A-7"}
    api.call("process.message", instance_id=instance_id, message="application_withdrawn",
             variables={"reason": "found a cheaper loan"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"number": 7, "application": "A-7", "reason": "found a cheaper loan",
                                 "closed": "A-7 withdrawn: found a cheaper loan"}
    rows = tasks_of(api, instance_id)
    assert {(rows[e]["task_id"], rows[e]["status"]) for e in ("check_credit", "check_identity")} == {
        (credit["task_id"], "cancelled"), (identity["task_id"], "cancelled")}


def test_a_non_interrupting_timer_event_subprocess_runs_beside_the_open_task(api, unique_code):
    deploy(api, "cov_event_subprocess_timer", unique_code, texts=with_timer("PT1S"))
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "review")
    timer = entry(waiting(api, instance_id, "review", "reminder_start"), "reminder_start")
    assert "due_at" in timer and "message" not in timer
    reminded = status_when(api, instance_id, lambda s: s["variables"].get("reminded"), "the reminder", timeout=10)
    assert_fired_on_time(timer["due_at"], utc_now())
    assert not any("due_at" in e for e in reminded["waiting_for"])
    assert tasks_of(api, instance_id)["review"]["status"] == "in_progress"
    api.call("task.complete", task_id=task["task_id"], result={})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed" and done["variables"] == {"reminded": True}


def test_a_call_activity_runs_the_latest_version_of_the_code_it_names(api, unique_code):
    callee = f"{unique_code}-tax"
    deploy(api, "cov_call_activity_callee", callee)
    deploy(api, "cov_call_activity_caller", unique_code,
           texts={'calledElement="cov_call_activity_callee"': f'calledElement="{callee}"'})
    done = api.wait_for(start(api, unique_code, net=100, country="FR"))
    assert (done["status"], done["error"]) == ("completed", None), done
    assert done["variables"] == {"net": 100, "country": "FR", "rate": 0.2, "tax": 20.0, "total": 120.0}


def test_a_call_activity_whose_callee_is_not_deployed_fails_clearly_and_can_be_retried(api, unique_code):
    callee = f"{unique_code}-missing"
    deploy(api, "cov_call_activity_caller", unique_code,
           texts={'calledElement="cov_call_activity_callee"': f'calledElement="{callee}"'})
    instance_id = start(api, unique_code, net=50, country="DE")
    failed = api.wait_for(instance_id)
    assert failed["status"] == "failed"
    assert failed["error"]["message"] == f"The called process '{callee}' is not deployed."

    deploy(api, "cov_call_activity_callee", callee)
    api.call("process.retry", instance_id=instance_id)
    done = api.wait_for(instance_id)
    assert (done["status"], done["error"]) == ("completed", None), done
    assert done["variables"]["total"] == 55.0


# -- loops ------------------------------------------------------------------------------------------

def test_a_standard_loop_repeats_while_its_condition_holds(api, unique_code):
    deploy(api, "cov_standard_loop", unique_code)
    done = api.wait_for(start(api, unique_code, attempts=0))
    assert done["status"] == "completed" and done["variables"] == {"attempts": 3}


def test_a_sequential_multi_instance_sees_each_previous_result(api, unique_code):
    deploy(api, "cov_multi_instance_sequential", unique_code)
    lines = [{"price": 2, "quantity": 3}, {"price": 5, "quantity": 1}, {"price": 1, "quantity": 4}]
    done = api.wait_for(start(api, unique_code, lines=lines, total=0))
    assert done["status"] == "completed" and done["variables"] == {"lines": lines, "total": 15}


def test_a_parallel_multi_instance_collects_each_instances_output_in_order(api, unique_code):
    deploy(api, "cov_multi_instance_parallel", unique_code)
    done = api.wait_for(start(api, unique_code, suppliers=["acme", "globex", "ab"]))
    assert done["status"] == "completed"
    assert done["variables"]["quotes"] == [{"supplier": "acme", "price": 400}, {"supplier": "globex", "price": 600},
                                           {"supplier": "ab", "price": 200}]


# -- gateways ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("variables", "taken"), [
    ({"amount": 5000, "country": "DE"}, {"legal", "export"}),
    ({"amount": 5000, "country": "FR"}, {"legal"}),
    ({"amount": 10, "country": "FR"}, {"logged"}),
])
def test_an_inclusive_gateway_takes_every_true_branch_and_joins_them(api, unique_code, variables, taken):
    deploy(api, "cov_inclusive_gateway", unique_code)
    done = api.wait_for(start(api, unique_code, **variables))
    assert done["status"] == "completed"
    assert set(done["variables"]) - set(variables) == taken


def test_a_parallel_gateway_joins_a_script_branch_and_a_user_task(api, unique_code):
    deploy(api, "cov_parallel_gateway", unique_code)
    instance_id = start(api, unique_code)
    task = open_task(api, instance_id, "invoice")
    status = waiting(api, instance_id, "invoice")
    assert entry(status, "invoice") == {"element_id": "invoice", "kind": "userTask"}
    assert status["variables"].get("packed") is True
    api.call("task.complete", task_id=task["task_id"], result={"invoice_no": "F-1"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"packed": True, "invoice_no": "F-1"}


def test_parallel_branches_do_not_see_each_others_in_place_changes_to_nested_data(api, unique_code):
    deploy(api, "rt_parallel_nested", unique_code)
    done = api.wait_for(start(api, unique_code))
    assert done["status"] == "completed", done
    variables = done["variables"]
    assert variables["seen_by_a"] == {"a": 1, "b": 0, "lines": ["x", "a"]}
    assert variables["seen_by_b_before"] == {"a": 0, "b": 0, "lines": ["x"]}
    assert variables["seen_by_b"] == {"a": 0, "b": 2, "lines": ["x", "b"]}


def test_an_event_based_gateway_follows_the_message_when_it_comes_first(api, unique_code):
    deploy(api, "cov_event_gateway", unique_code, texts=with_timer("PT1H", old="PT0.2S"))
    instance_id = start(api, unique_code)
    status = waiting(api, instance_id, "first")
    gateway = entry(status, "first")
    assert gateway == {"element_id": "first", "kind": "eventBasedGateway", "message": "customer_answered",
                       "due_at": gateway["due_at"]}
    assert 3500 < (at(gateway["due_at"]) - utc_now()).total_seconds() <= 3600
    api.call("process.message", instance_id=instance_id, message="customer_answered", variables={"answer": "yes"})
    done = api.wait_for(instance_id)
    assert done["status"] == "completed"
    assert done["variables"] == {"answer": "yes", "outcome": "answered: yes"}


def test_an_event_based_gateway_follows_the_timer_on_time_and_then_refuses_the_message(api, unique_code):
    deploy(api, "cov_event_gateway", unique_code, texts=with_timer("PT1S", old="PT0.2S"))
    instance_id = start(api, unique_code)
    gateway = entry(waiting(api, instance_id, "first"), "first")
    assert gateway["message"] == "customer_answered" and "due_at" in gateway
    done = api.wait_for(instance_id, timeout=10)
    assert done["status"] == "completed" and done["variables"] == {"outcome": "timed out"}
    assert_fired_on_time(gateway["due_at"], done["completed_at"])
    assert_conflict(lambda: api.call("process.message", instance_id=instance_id, message="customer_answered",
                                     variables={"answer": "too late"}))


# -- operators --------------------------------------------------------------------------------------

@pytest.fixture
def receiver():
    started = Receiver(Answer(201, {"id": 41, "state": "open"}, delay_s=0.5)).start()
    yield started
    started.stop()


def test_an_http_task_calls_the_receiver_and_the_next_step_uses_its_answer(api, unique_code, receiver):
    deploy(api, "cov_http_task", unique_code, texts={"https://crm.example.com": "{{ crm_url }}"})
    instance_id = start(api, unique_code, crm_url=receiver.url, customer_id=7, subject="Broken", crm_token="s3cret")
    status = waiting(api, instance_id, "create_ticket")
    assert entry(status, "create_ticket")["operator"] == "http"
    done = api.wait_for(instance_id)
    assert done["status"] == "completed", done
    assert done["variables"]["ticket"] == {"id": 41, "state": "open"} and done["variables"]["ticket_id"] == 41
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/api/customers/7/tickets")
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.json() == {"subject": "Broken"}
