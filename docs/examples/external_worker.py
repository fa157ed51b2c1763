"""A Baton external-task worker: fetch invoices to create, do the work, report (docs/api.md)."""
import os
import requests

URL, KEY = os.environ.get("BATON_URL", "http://127.0.0.1:5000") + "/v1/rpc", os.environ["BATON_API_KEY"]
WORKER = "invoicer-1"


def call(method, **params):
    body = requests.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                         headers={"X-API-Key": KEY}, timeout=60).json()
    return body.get("result") or print(method, "refused:", body["error"]["message"]) or {"tasks": []}


while True:  # long polling: a fetch waits up to 30 s for work, so an idle worker never spins
    for task in call("external.fetch_and_lock", worker_id=WORKER, wait_ms=30_000,
                     topics=[{"name": "invoiceCreator", "lock_duration_ms": 60_000}])["tasks"]:
        try:
            invoice = f"INV-{task['variables']['order_id']}"  # the real work goes here
        except Exception as exc:  # fetched again in 1 s, up to 3 tries in all; then the instance fails
            retries = 2 if task["retries"] is None else task["retries"] - 1
            call("external.failure", task_id=task["task_id"], worker_id=WORKER, message=f"no {exc}",
                 retries=retries, retry_timeout_ms=1_000)
            continue
        call("external.complete", task_id=task["task_id"], worker_id=WORKER, variables={"invoice": invoice})
