"""Does an instance's cost per step grow with its history? Time per step and bytes per save.

    python bench/big_instance.py                              # both backends, loop 500 + parallel 200
    python bench/big_instance.py --backends sqlite --rounds 1
    python bench/big_instance.py --iterations 100 --branches 50   # a smoke run

Two processes, generated here, each driven one step at a time by ``process.message`` (the use case
``engine.instances.send_message``, as the RPC method calls it):

* ``loop``: start -> receive task ``tick`` -> script ``counter = counter + 1`` -> exclusive gateway
  (``counter < N``: back to the receive task) -> end. Step k is the k-th ``tick``; the instance
  has passed 3k elements when it is saved. The history grows without bound.
* ``parallel``: start -> parallel split -> N branches, each one receive task ``b<i>`` -> parallel
  join -> end. Step k completes the k-th branch; the tree is wide from the start.

A real server (``tests.harness.BatonServer``) deploys both and starts one instance of each, and is
stopped; then, in this process, on the same database, as one worker thread does: for each step,
``send_message`` (committed) + a claim + the job's ``Runner.handle`` in its unit of work. Timed: the
advance alone (claim-to-save: load the state, apply the message, run the engine steps, save and
commit), wall clock and thread CPU. Bytes
per save: the ``instances.state`` text that the save wrote, plus the path rows it appended
(``instance_steps.steps``, when that table exists). The figure at step k is the median (times) or
the mean (bytes: a tree is pruned only past ``PRUNE_ABOVE`` tasks, so one save in several appends
rows) of steps k-4 .. k; each round is a fresh instance, and the printed figure is the median over
rounds. The ratio last/tenth is the target (<= 2).

Results: bench/results/big-instance-latest.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import run_header  # noqa: E402
from tests.harness import (BatonServer, claim_jobs, create_postgres_database,  # noqa: E402
                            drop_postgres_database)
from engine.jobs.worker import run_job  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "big-instance-latest.json"
TARGET_RATIO = 2.0
WINDOW = 5

_NS = ('xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL" id="defs" '
       'targetNamespace="http://baton.dev/bench"')


def loop_bpmn(iterations: int) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {_NS}>
  <bpmn:message id="msg_tick" name="tick" />
  <bpmn:process id="big_loop" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait" />
    <bpmn:receiveTask id="wait" messageRef="msg_tick" />
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="count" />
    <bpmn:scriptTask id="count" scriptFormat="python"><bpmn:script>counter = counter + 1</bpmn:script></bpmn:scriptTask>
    <bpmn:sequenceFlow id="f3" sourceRef="count" targetRef="again" />
    <bpmn:exclusiveGateway id="again" default="done" />
    <bpmn:sequenceFlow id="back" sourceRef="again" targetRef="wait">
      <bpmn:conditionExpression>counter &lt; {iterations}</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="done" sourceRef="again" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""


def parallel_bpmn(branches: int) -> str:
    messages = "\n".join(f'  <bpmn:message id="msg_b{i}" name="b{i}" />' for i in range(1, branches + 1))
    body = []
    for i in range(1, branches + 1):
        body.append(f'    <bpmn:sequenceFlow id="s{i}" sourceRef="split" targetRef="r{i}" />')
        body.append(f'    <bpmn:receiveTask id="r{i}" messageRef="msg_b{i}" />')
        body.append(f'    <bpmn:sequenceFlow id="j{i}" sourceRef="r{i}" targetRef="join" />')
    flows = "\n".join(body)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions {_NS}>
{messages}
  <bpmn:process id="big_parallel" isExecutable="true">
    <bpmn:startEvent id="start" />
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="split" />
    <bpmn:parallelGateway id="split" />
{flows}
    <bpmn:parallelGateway id="join" />
    <bpmn:sequenceFlow id="f2" sourceRef="join" targetRef="end" />
    <bpmn:endEvent id="end" />
  </bpmn:process>
</bpmn:definitions>"""


def prepare(url: str, workdir: Path, iterations: int, branches: int, rounds: int) -> dict:
    """Deploy both processes and start ``rounds`` instances of each through a real server."""
    server = BatonServer(url, workdir, BATON_WORKERS="1").start()
    try:
        api = server.api(server.create_tenant("bench"))
        loop_id = api.deploy(loop_bpmn(iterations), code="big-loop")["definition_id"]
        parallel_id = api.deploy(parallel_bpmn(branches), code="big-parallel")["definition_id"]
        started = {"loop": [], "parallel": []}
        for _ in range(rounds):
            started["loop"].append(api.call("process.start", definition_id=loop_id,
                                            variables={"counter": 0})["instance_id"])
            started["parallel"].append(api.call("process.start", definition_id=parallel_id)["instance_id"])
        api.wait_until_idle(timeout=120)
        return started
    finally:
        server.stop()


def drive(url: str, started: dict, iterations: int, branches: int) -> dict:
    """Step every instance to its end in this process; per process, per round, the steps' figures."""
    from sqlalchemy import inspect, text

    from app import advance_contributors, create_app
    from engine import instances
    from engine.runtime.runner import Runner
    from engine.sandbox import Sandbox, SandboxScriptEngine
    from engine.store.db import db
    from engine.store.workflows import SpecCache

    app = create_app({"database_url": url, "workers": 0})
    figures: dict[str, list[list[dict]]] = {"loop": [], "parallel": []}
    with app.app_context():
        has_steps = inspect(db.engine).has_table("instance_steps")
        sandbox = Sandbox(hosts=1)
        runner = Runner(SandboxScriptEngine(sandbox), SpecCache(), advance_contributors("http://127.0.0.1"))
        try:
            for name, messages in (("loop", ["tick"] * iterations),
                                   ("parallel", [f"b{i}" for i in range(1, branches + 1)])):
                for instance_id in started[name]:
                    tenant_id = db.session.execute(text("SELECT tenant_id FROM instances WHERE id = :id"),
                                                   {"id": instance_id}).scalar_one()
                    db.session.rollback()
                    figures[name].append(_steps(app.extensions["baton.units"], runner, tenant_id, instance_id,
                                                messages, has_steps, instances, db, text))
        finally:
            sandbox.close()
    return figures


def _steps(units, runner, tenant_id, instance_id, messages, has_steps, instances, db, text) -> list[dict]:
    steps = []
    last_row = 0
    for number, message in enumerate(messages, start=1):
        with units.begin("bench") as uow:
            instances.send_message(uow, tenant_id, instance_id, message, None)
        [job] = claim_jobs(units, "bench", 60)
        wall, cpu = time.perf_counter(), time.thread_time()
        run_job(units, runner, job, "bench")
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        db.session.remove()
        status, state_bytes = db.session.execute(text(
            "SELECT status, length(state) FROM instances WHERE id = :id"), {"id": instance_id}).one()
        path_bytes = 0
        if has_steps:
            rows = db.session.execute(text(
                "SELECT id, length(CAST(steps AS TEXT)) FROM instance_steps WHERE instance_id = :id AND id > :after"),
                {"id": instance_id, "after": last_row}).all()
            path_bytes = sum(size or 0 for _, size in rows)
            last_row = max([last_row, *(row_id for row_id, _ in rows)])
        db.session.rollback()
        steps.append({"step": number, "wall_ms": 1000 * wall, "cpu_ms": 1000 * cpu,
                      "state_bytes": state_bytes or 0, "path_bytes": path_bytes, "status": status})
        expected_end = number == len(messages)
        if status != "running" and not expected_end:
            steps[-1]["failed_early"] = True
            break
    return steps


def summarize(rounds: list[list[dict]], marks: list[int]) -> dict:
    """The figures at each mark (median of the WINDOW steps ending there, then over rounds)."""
    out: dict = {"marks": {}}
    failed = [r[-1] for r in rounds if r and r[-1].get("failed_early")]
    if failed:
        out["failed_at_step"] = min(step["step"] for step in failed)
    for mark in marks:
        per_round = []
        for steps in rounds:
            window = [s for s in steps if mark - WINDOW < s["step"] <= mark]
            if len(window) == 0 or steps[-1]["step"] < mark:
                continue
            # Times: the median (single steps are noisy); bytes: the mean (a pruning save is one of several).
            per_round.append({**{key: statistics.median(s[key] for s in window) for key in ("wall_ms", "cpu_ms")},
                              **{key: statistics.mean(s[key] for s in window) for key in ("state_bytes", "path_bytes")}})
        if per_round:
            out["marks"][mark] = {key: round(statistics.median(r[key] for r in per_round), 3)
                                  for key in per_round[0]}
    ends = [steps[-1] for steps in rounds if steps]
    out["final_status"] = sorted({s["status"] for s in ends})
    tenth, last = out["marks"].get(marks[0]), out["marks"].get(marks[-1])
    if tenth and last:
        out["ratio_last_to_tenth_wall"] = round(last["wall_ms"] / tenth["wall_ms"], 2)
        out["ratio_last_to_tenth_cpu"] = round(last["cpu_ms"] / tenth["cpu_ms"], 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--branches", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    backends = [b for b in args.backends.split(",") if b]
    marks = {"loop": sorted({10, 100, args.iterations}), "parallel": sorted({10, 100, args.branches})}
    results: dict = {**run_header(load_before, postgresql="postgresql" in backends),
                     "options": vars(args), "target_ratio": TARGET_RATIO, "backends": {}}
    started_at = time.monotonic()
    ok = True
    for backend in backends:
        workdir = Path(tempfile.mkdtemp(prefix="baton-big-"))
        url = f"sqlite:///{workdir / 'bench.db'}" if backend == "sqlite" else create_postgres_database()
        try:
            started = prepare(url, workdir, args.iterations, args.branches, args.rounds)
            figures = drive(url, started, args.iterations, args.branches)
        finally:
            if backend != "sqlite":
                drop_postgres_database(url)
            shutil.rmtree(workdir, ignore_errors=True)
        results["backends"][backend] = {name: summarize(rounds, marks[name]) for name, rounds in figures.items()}
        for name, summary in results["backends"][backend].items():
            print(f"\n{backend} / {name} ({args.rounds} rounds; steps k-{WINDOW - 1}..k: median ms, mean bytes; "
                  "then the median of rounds)")
            print(f"  {'step':>6} {'advance ms':>11} {'cpu ms':>8} {'state B':>9} {'path B':>7}")
            for mark, row in summary["marks"].items():
                print(f"  {mark:>6} {row['wall_ms']:>11.2f} {row['cpu_ms']:>8.2f} {row['state_bytes']:>9.0f} "
                      f"{row['path_bytes']:>7.0f}")
            if "failed_at_step" in summary:
                print(f"  FAILED at step {summary['failed_at_step']} (status {summary['final_status']})")
                ok = False
            ratio = summary.get("ratio_last_to_tenth_wall")
            if ratio is not None:
                verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
                print(f"  last/tenth: wall {ratio}  cpu {summary['ratio_last_to_tenth_cpu']}  "
                      f"(target <= {TARGET_RATIO}: {verdict})")
                ok = ok and ratio <= TARGET_RATIO
    results["run_seconds"] = round(time.monotonic() - started_at, 1)
    results["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nload before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}; {results['run_seconds']} s; "
          f"results in {RESULTS.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
