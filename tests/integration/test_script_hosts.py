"""Script hosts per tenant (INTERFACE §5.10, docs/operations.md "Script hosts").

Planted escapes: a pool of the real sandbox, in this process (which plays the server), whose hosts
are started with the test-only switch ``BATON_TEST_ONLY_UNRESTRICTED_HOSTS`` (engine/sandbox/host.py):
the test then sends a host plain Python, as a script that got out of RestrictedPython would run,
and checks what it can still reach: not another tenant's variables, not the server's process, no
socket, no write outside its own /tmp, no way to lift its limits. Then a real server on both
databases: a cold host start is paid once per tenant, not per script; a host is replaced after
``BATON_SCRIPT_HOST_RUNS`` scripts and after a script broke a limit; scripts still work.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid

import pytest

from engine.sandbox import Sandbox
from engine.sandbox.scripts import TEST_ESCAPE_ENV, plan_launch, resolve_user
from tests.conftest import BACKENDS
from tests.harness import ROOT, BatonServer
from tests.integration.test_metrics import moved, scrape

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces and /proc are Linux's")

SECRET = "tenant-one-secret-" + uuid.uuid4().hex
LOOP = "total = 0\nfor i in range(n):\n    total += i\n"  # never run in-process: always a host's


@pytest.fixture(params=["auto", "off"], ids=["namespaced", "user-only"])
def escapable(request, monkeypatch):
    """A pool whose hosts accept the test-only unrestricted request (and only this pool's: the
    variable is in this process's environment for the test's duration); started as the server
    starts them (``auto``: in namespaces where bubblewrap works), and without namespaces (``off``:
    only the change of user, when we are root), the fallback."""
    launch = plan_launch(request.param)
    if request.param == "auto" and not launch.namespaced:
        pytest.skip(f"bubblewrap does not run hosts here: {launch.note}")
    if request.param == "off" and launch.drop_to is None:
        pytest.skip("not root: without namespaces the hosts run as the server's own user")
    monkeypatch.setenv(TEST_ESCAPE_ENV, "1")
    box = Sandbox(timeout_s=5, memory_mb=128, hosts=4, launch=launch)
    yield box
    box.close()


def escape(box: Sandbox, tenant, source: str):
    """Run ``source`` unrestricted in a host of ``tenant``; what it leaves in ``result``."""
    host = box._acquire(tenant)
    try:
        if not host.alive():
            box._start(host)
        reply = host.call(json.dumps({"unrestricted": source}).encode() + b"\n", 10)
    finally:
        box._release(host)
    assert reply["ok"], reply
    return reply["result"]


FREE_A_DESCRIPTOR = "import os\nos.close(0)  # the host's /dev/null: one free slot under RLIMIT_NOFILE\n"

SCAN_MEMORY = FREE_A_DESCRIPTOR + '''
import ctypes
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again, so that it can read its own memory (the control)
def scan(pid, needle):
    found = False
    with open(f"/proc/{pid}/maps") as maps:
        regions = [line.split()[:2] for line in maps]
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for span, perms in regions:
            if not perms.startswith("r"):
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            at = start
            while at < end and not found:  # 1 MB at a time, overlapping by the needle
                try:
                    mem.seek(at)
                    found = needle in mem.read(min(end - at, 1 << 20))
                except OSError:
                    break
                at += (1 << 20) - len(needle)
    return found
seen, readable, found, errors = [], [], [], {}
for name in os.listdir("/proc"):
    if not name.isdigit():
        continue
    pid = int(name)
    seen.append(pid)
    if pid == os.getpid():
        continue
    try:
        if scan(pid, NEEDLE):
            found.append(pid)
        readable.append(pid)
    except OSError as exc:
        errors[pid] = type(exc).__name__
marker = "own-marker-" + "x" * 8
result = {"me": os.getpid(), "seen": seen, "readable": readable, "found": found, "errors": errors,
          "own": scan(os.getpid(), marker.encode())}
'''


@linux_only
def test_an_escaped_script_cannot_see_another_tenants_variables(escapable):
    # Tenant 1's host holds the secret (it went through its pipe and its interpreter); it stays alive.
    assert escapable.execute(LOOP + "kept = secret\n", {"n": 3, "secret": SECRET}, tenant=1)["kept"] == SECRET
    one = [h for h in escapable._hosts if h.tenant == 1][0].proc.pid
    result = escape(escapable, 2, SCAN_MEMORY.replace("NEEDLE", repr(SECRET.encode())))
    assert result["own"] is True  # the scan works: it finds what is in its own memory
    assert result["found"] == []  # ... and the secret nowhere it can read
    if escapable.launch.namespaced:
        assert set(result["seen"]) <= {1, result["me"]}  # its own pid namespace: bubblewrap's init and itself
    else:
        assert one not in result["readable"]  # non-dumpable: no other host's memory
    assert [h.tenant for h in escapable._hosts if h.alive()] == [1, 2]  # never the same host


@linux_only
def test_an_escaped_script_cannot_signal_the_server(escapable):
    result = escape(escapable, 1, f'''
import os, signal
tries = {{}}
for name, pid in (("server", {os.getpid()}), ("parent", os.getppid()), ("init", 1)):
    try:
        os.kill(pid, 0)  # the permission check of any signal, without the signal
        tries[name] = "allowed"
    except OSError as exc:
        tries[name] = type(exc).__name__
result = tries
''')
    assert "allowed" not in result.values(), result
    if escapable.launch.namespaced:
        assert result["server"] == "ProcessLookupError"  # not even there: another pid namespace
    else:
        assert result["server"] == "PermissionError"  # another user's
    assert result["init"] == "PermissionError"


# What only the namespaces stop (without them, the hosts have an unprivileged user and limits): these
# tests take the namespaced pool alone.
namespaced_only = pytest.mark.parametrize("escapable", ["auto"], indirect=True, ids=["namespaced"])


@linux_only
@namespaced_only
def test_an_escaped_script_cannot_open_a_socket(escapable):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    accepted = []

    def accept():
        try:
            accepted.append(listener.accept())
        except OSError:  # closed at the end of the test
            pass

    threading.Thread(target=accept, daemon=True).start()
    port = listener.getsockname()[1]
    try:
        result = escape(escapable, 1, FREE_A_DESCRIPTOR + f'''
import errno, socket
tries = {{}}
for name, family, address in (("tcp", socket.AF_INET, ("127.0.0.1", {port})),
                              ("dns", socket.AF_INET, ("1.1.1.1", 53)),
                              ("unix", socket.AF_UNIX, "/run/postgresql/.s.PGSQL.5432")):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(address)
            tries[name] = "connected"
    except OSError as exc:
        tries[name] = errno.errorcode.get(exc.errno, str(exc))
result = tries
''')
    finally:
        listener.close()
    # The socket was made (a free descriptor), the network is what is missing: its namespace's own
    # loopback, where nothing listens, and no route out; the server's unix sockets are not there.
    assert result == {"tcp": "ECONNREFUSED", "dns": "ENETUNREACH", "unix": "ENOENT"}, result
    assert accepted == []  # this process's listener on 127.0.0.1 never saw it


@linux_only
@namespaced_only
def test_an_escaped_script_cannot_write_outside_its_temp_dir(escapable, tmp_path):
    targets = [tmp_path / "escaped", ROOT / f"escaped-{uuid.uuid4().hex[:6]}", "/escaped", "/usr/escaped",
               f"{sys.prefix}/escaped", "/proc/escaped", "/dev/escaped"]
    result = escape(escapable, 1, FREE_A_DESCRIPTOR + f'''
tries = {{}}
for path in {[str(t) for t in targets] + ["/tmp/mine"]!r}:
    try:
        with open(path, "w"):
            pass
        tries[path] = "written"
        os.unlink(path)
    except OSError as exc:
        tries[path] = type(exc).__name__
result = tries
''')
    assert result.pop("/tmp/mine") == "written"  # its own temp dir
    assert "written" not in result.values(), result
    for target in targets:
        assert not os.path.exists(target)


@linux_only
def test_an_escaped_script_cannot_lift_its_limits(escapable):
    result = escape(escapable, 1, '''
import os, resource
tries = {}
for name in ("RLIMIT_NOFILE", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE"):
    which = getattr(resource, name)
    try:
        resource.setrlimit(which, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        tries[name] = "lifted"
    except (ValueError, OSError) as exc:
        tries[name] = type(exc).__name__
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    tries["fork"] = "forked"
except OSError as exc:
    tries["fork"] = type(exc).__name__
result = tries
''')
    assert "lifted" not in result.values() and result["fork"] != "forked", result


def test_without_the_test_switch_a_host_refuses_unrestricted_code(monkeypatch):
    monkeypatch.delenv(TEST_ESCAPE_ENV, raising=False)
    box = Sandbox(timeout_s=5, hosts=1)
    try:
        host = box._acquire(1)
        box._start(host)
        reply = host.call(json.dumps({"unrestricted": "result = 1"}).encode() + b"\n", 10)
        box._release(host)
    finally:
        box.close()
    assert reply["ok"] is False and "bad request" in reply["message"]


# --- a real server ------------------------------------------------------------------------------

def script_process(code: str, script: str) -> str:
    body = script.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="d_{code}"
                  targetNamespace="http://baton.dev/tests">
  <bpmn:process id="{code}" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work" />
    <bpmn:scriptTask id="work" scriptFormat="python"><bpmn:script>{body}</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""


def script_hosts_of(pid: int) -> dict[int, dict[str, str]]:
    """The interpreters running host.py below ``pid`` (through bubblewrap's processes): pid -> status."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(name))
    found, todo = {}, list(children.get(pid, []))
    while todo:
        child = todo.pop()
        todo += children.get(child, [])
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                command = f.read().split(b"\0")
            with open(f"/proc/{child}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except OSError:
            continue
        if status["Name"].strip().startswith("python") and any(part.endswith(b"host.py") for part in command):
            found[child] = status
    return found


def running(pid: int) -> bool:
    """Alive (a zombie waiting for whoever adopted it is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def starts(values: dict, before: dict, reason: str) -> float:
    return moved(before, values, f'baton_script_host_starts_total{{reason="{reason}"}}')


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_host_start_is_paid_once_per_tenant_and_hosts_are_recycled(backend, own_database, tmp_path):
    # One engine thread: the scripts of a tenant run one after another, so every start is counted exactly.
    server = BatonServer(own_database, tmp_path, BATON_WORKERS="1", BATON_CALL_THREADS="0",
                         BATON_SCRIPT_HOST_RUNS="8", BATON_SCRIPT_TIMEOUT_S="1").start()
    try:
        apis = [server.api(server.create_tenant(f"hosts-{n}-{uuid.uuid4().hex[:6]}")) for n in (1, 2)]
        for api in apis:
            api.deploy(script_process("loop", LOOP + "who = owner\n"), code="loop")
        before = scrape(server.base_url)
        ids = []
        for round_ in range(6):
            for n, api in enumerate(apis):
                ids.append((api, api.call("process.start", definition_id="loop",
                                          variables={"n": round_ + 2, "owner": f"tenant-{n}"})["instance_id"], n))
        for api, instance_id, n in ids:
            status = api.wait_for(instance_id, timeout=60)
            assert status["status"] == "completed", status
            assert status["variables"]["who"] == f"tenant-{n}"
        after = scrape(server.base_url)
        assert starts(after, before, "new") == 2  # 12 scripts, 2 tenants: 2 cold starts
        assert sum(starts(after, before, r) for r in ("recycled", "limit", "crashed", "evicted")) == 0

        # 8 runs per host: 6 more scripts of tenant 1 (12 in all) replace its host once.
        more = [apis[0].call("process.start", definition_id="loop", variables={"n": 3, "owner": "x"})["instance_id"]
                for _ in range(6)]
        for instance_id in more:
            assert apis[0].wait_for(instance_id, timeout=60)["status"] == "completed"
        recycled = scrape(server.base_url)
        assert starts(recycled, before, "recycled") == 1 and starts(recycled, before, "new") == 2

        # A script that broke the time limit takes its host with it; the next one gets a fresh host.
        apis[1].deploy(script_process("spin", "n = 0\nwhile True:\n    n += 1\n"), code="spin")
        spun = apis[1].call("process.start", definition_id="spin")["instance_id"]
        failed = apis[1].wait_for(spun, timeout=60)
        assert failed["status"] == "failed" and "time limit" in json.dumps(failed)
        again = apis[1].call("process.start", definition_id="loop", variables={"n": 4, "owner": "y"})["instance_id"]
        assert apis[1].wait_for(again, timeout=60)["variables"]["total"] == 6
        limited = scrape(server.base_url)
        assert starts(limited, before, "limit") == 1 and starts(limited, before, "new") == 2

        # The server's own hosts: one per tenant, as the unprivileged user when the server is root.
        hosts = script_hosts_of(server.process.pid)
        assert len(hosts) == 2, hosts
        if os.geteuid() == 0:
            uid = str(resolve_user("nobody")[0])
            assert all(status["Uid"].split() == [uid] * 4 and int(status["CapEff"], 16) == 0
                       for status in hosts.values()), hosts
        # kill -9 of the server leaves no host behind (bubblewrap: dies with its parent; else: EOF).
        server.kill()
        deadline = time.monotonic() + 10
        while any(running(pid) for pid in hosts) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in hosts if running(pid)]
    finally:
        server.stop()
