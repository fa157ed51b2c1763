"""An ExternalTaskWorker process for the client's tests (tests/integration/test_client_worker.py):

    BATON_URL=... BATON_API_KEY=... python -m tests.client_worker WORKER_ID TOPIC MODE RECORD [THREADS] [LOCK_MS]

MODE ``complete`` appends "<task_id> <instance_id>" to RECORD and completes with ``{"done_by": WORKER_ID}``;
``slow`` does the same after 1.5 s; ``hang`` appends the line and never returns (a worker to kill -9).
"""
from __future__ import annotations

import sys
import threading
import time

from baton.client import Client, ExternalTaskWorker


def main(worker_id: str, topic: str, mode: str, record: str, threads: str = "4", lock_ms: str = "60000") -> None:
    worker = ExternalTaskWorker(Client.from_environment(), worker_id, threads=int(threads),
                                lock_duration_ms=int(lock_ms), wait_ms=2_000)
    written = threading.Lock()

    @worker.subscribe(topic)
    def handle(task):
        with written, open(record, "a") as out:
            out.write(f"{task.task_id} {task.instance_id}\n")
        if mode == "hang":
            threading.Event().wait()
        if mode == "slow":
            time.sleep(1.5)
        return {"done_by": worker_id}

    print(f"worker {worker_id} running", flush=True)
    worker.run()
    print(f"worker {worker_id} stopped", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
