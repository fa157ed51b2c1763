"""The pool of script hosts: one tenant per host, replaced after a bounded number of runs and after a
broken limit, started as an unprivileged user (when we are root) and in namespaces where bubblewrap
works; the planted escapes are in tests/integration/test_script_hosts.py."""
from __future__ import annotations

import os
import sys

import pytest

from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
from SpiffWorkflow.spiff.parser.process import SpiffBpmnParser

from engine.errors import BatonError, SandboxLimitError
from engine.sandbox import Sandbox, SandboxScriptEngine
from engine.sandbox.scripts import Launch, plan_launch, resolve_user
from tests.unit.engine.sandbox.test_sandbox import BPMN, host_process

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
as_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="the server is not root here")

# A loop: never run in-process by engine.sandbox.inline_scripts, always by a host.
LOOP = "total = 0\nfor i in range(n):\n    total += i\n"


def pid_of(box: Sandbox, tenant) -> int:
    [host] = [h for h in box._hosts if h.tenant == tenant and h.alive()]
    return host.proc.pid


def status_of(pid: int) -> dict[str, str]:
    with open(f"/proc/{host_process(pid)}/status") as f:
        return dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)


@pytest.fixture
def box():
    sandbox = Sandbox(timeout_s=1, memory_mb=128, hosts=3, runs_per_host=5)
    yield sandbox
    sandbox.close()


def test_each_tenant_gets_its_own_host_and_keeps_it_warm(box):
    for _ in range(4):
        assert box.execute(LOOP, {"n": 4}, tenant=1)["total"] == 6
        assert box.execute(LOOP, {"n": 5}, tenant=2)["total"] == 10
    assert box.starts == 2  # one cold start per tenant, not one per script
    assert pid_of(box, 1) != pid_of(box, 2)
    assert sorted(h.tenant for h in box._hosts) == [1, 2]


def test_a_host_is_replaced_after_its_runs(box):
    box.execute(LOOP, {"n": 1}, tenant="a")
    first = pid_of(box, "a")
    for _ in range(4):
        box.execute(LOOP, {"n": 1}, tenant="a")
    assert not [h for h in box._hosts if h.alive()]  # the fifth run retired it
    box.execute(LOOP, {"n": 1}, tenant="a")
    assert pid_of(box, "a") != first and box.starts == 2
    for _ in range(9):  # 10 more runs: two more hosts
        box.execute(LOOP, {"n": 1}, tenant="a")
    assert box.starts == 3


@pytest.mark.parametrize("script", ["while True:\n    pass\n", "x = [0] * (10 ** 9)\n", "x = 'a' * (17 * 2 ** 20)\n"])
def test_a_host_whose_script_broke_a_limit_is_replaced(box, script):
    box.execute(LOOP, {"n": 1}, tenant=1)
    before = pid_of(box, 1)
    with pytest.raises(SandboxLimitError):
        box.execute(script, {}, tenant=1)
    assert box.execute(LOOP, {"n": 3}, tenant=1)["total"] == 3
    assert pid_of(box, 1) != before and box.starts == 2


def test_a_full_pool_gives_the_least_recently_used_idle_host_to_the_new_tenant():
    box = Sandbox(timeout_s=1, hosts=2)
    try:
        box.execute(LOOP, {"n": 1}, tenant=1)
        box.execute(LOOP, {"n": 1}, tenant=2)
        one, two = pid_of(box, 1), pid_of(box, 2)
        box.execute(LOOP, {"n": 1}, tenant=1)  # 2 is now the least recently used
        box.execute(LOOP, {"n": 1}, tenant=3)
        assert sorted(h.tenant for h in box._hosts) == [1, 3]
        assert pid_of(box, 1) == one and two not in {h.proc.pid for h in box._hosts if h.alive()}
        with pytest.raises(OSError):
            os.kill(two, 0)  # killed and reaped, not only forgotten
        assert box.starts == 3
    finally:
        box.close()


def test_a_pool_that_requires_tenants_refuses_a_script_without_one():
    box = Sandbox(timeout_s=1, hosts=1, tenant_required=True)
    try:
        with pytest.raises(BatonError, match="without its tenant"):
            box.execute(LOOP, {"n": 1})
        assert box.starts == 0
        assert box.execute(LOOP, {"n": 2}, tenant=5)["total"] == 1
    finally:
        box.close()


def test_the_script_engine_of_a_tenant_runs_its_scripts_in_that_tenants_hosts(box):
    engine = SandboxScriptEngine(box)
    assert engine.for_tenant(7) is engine.for_tenant(7) and engine.for_tenant(7).tenant == 7
    with pytest.raises(ValueError):
        engine.for_tenant(7).for_tenant(8)  # a tenant's engine never serves another tenant
    parser = SpiffBpmnParser()
    parser.add_bpmn_str(BPMN.replace("CONDITION", "total &gt; 10").replace(
        "total = a + b", "total = a\nfor i in range(b):\n    total += 1").encode())
    flow = BpmnWorkflow(parser.get_spec("order"), script_engine=engine.for_tenant(7))
    flow.get_next_task().data.update({"a": 1, "b": 3})
    flow.do_engine_steps()
    assert flow.is_completed() and flow.last_task.data["total"] == 4
    assert [h.tenant for h in box._hosts] == [7]


@linux_only
@as_root
def test_as_root_a_host_runs_as_the_unprivileged_user_without_capabilities(box):
    box.execute(LOOP, {"n": 1}, tenant=1)
    status = status_of(pid_of(box, 1))
    uid, gid = resolve_user("nobody")
    assert status["Uid"].split() == [str(uid)] * 4 and status["Gid"].split() == [str(gid)] * 4
    assert status["Groups"].strip() == ""
    assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0


@linux_only
@as_root
def test_without_namespaces_a_host_still_drops_to_the_user_and_runs_scripts():
    launch = plan_launch("off", "nobody")
    assert not launch.namespaced and launch.drop_to == resolve_user("nobody")
    box = Sandbox(timeout_s=1, hosts=1, launch=launch)
    try:
        assert box.execute(LOOP + "s = str(total) + '%d' % 2\n", {"n": 4}, tenant=1)["s"] == "62"
        assert status_of(pid_of(box, 1))["Uid"].split()[0] == str(launch.drop_to[0])
    finally:
        box.close()


def test_a_launch_as_the_servers_own_user_still_works():
    box = Sandbox(timeout_s=1, hosts=1, launch=Launch())
    try:
        assert box.execute(LOOP, {"n": 3}, tenant=1)["total"] == 3
    finally:
        box.close()


def test_bad_launch_settings_say_what_to_do():
    with pytest.raises(BatonError, match="BATON_SCRIPT_NAMESPACE must be one of auto, on, off"):
        plan_launch("sometimes")
    with pytest.raises(BatonError, match="useradd"):
        resolve_user("no-such-user-baton")
    with pytest.raises(BatonError, match="root"):
        resolve_user("root")
    assert resolve_user("4242") == (4242, 4242)  # an unnamed id is fine


def test_where_bubblewrap_works_hosts_run_in_namespaces_and_else_the_launch_says_why():
    launch = plan_launch()
    if launch.namespaced:
        assert "bubblewrap" in launch.note and launch.prefix[0].endswith("bwrap")
        assert "--unshare-net" in launch.prefix and "--unshare-pid" in launch.prefix
    else:
        assert "without namespaces" in launch.note
        with pytest.raises(BatonError, match="BATON_SCRIPT_NAMESPACE=on"):
            plan_launch("on")


def test_the_cpu_backstop_is_recognised_through_bubblewrap_too():
    import signal

    from engine.sandbox.scripts import _killed_by_cpu_limit

    assert _killed_by_cpu_limit(-signal.SIGXCPU)  # the host itself
    assert _killed_by_cpu_limit(128 + signal.SIGXCPU)  # bubblewrap passing on the signal that ended it
    assert not _killed_by_cpu_limit(-signal.SIGKILL) and not _killed_by_cpu_limit(1) and not _killed_by_cpu_limit(None)
