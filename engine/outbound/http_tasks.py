"""Operator service tasks (``operator = http`` today): work that calls out, run outside the instance.

The runner marks a ready operator task once and ``OperatorCalls`` enqueues an ``operator`` job in
its save. That job is not an instance job, so it never holds the instance's queue: it reads the
task's data, calls out with no transaction open and no lease on the instance, retries with backoff
on 5xx, 429, timeouts and connection errors, and hands the answer back as an ``operator_result``
job of the instance, which the runner applies under the usual compare-and-swap.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from SpiffWorkflow.util.task import TaskState
from sqlalchemy import select

from bpmn import operators_used
from bpmn.operators import INLINE_OPERATORS, operator_of
from engine import jobs
from engine import json_values
from engine.errors import BatonError, CallFailedError, OutboundError, OutboundRefusedError, ScriptError
from engine.jobs.kinds import OPERATOR, OPERATOR_RESULT
from engine.jobs.retry import http_task_delay
from engine.outbound.http import OutboundHttp
from engine.store import workflows
from engine.store.models import Instance
from engine.store.unit_of_work import UnitOfWork

log = logging.getLogger("baton.operators")

DISPATCHED, FAILED = "baton_dispatched", "baton_failed"
DEFAULT_RETRIES = 3
RETRYABLE_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class HttpCall:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    timeout_s: float


class OperatorCalls:
    """Contributor (``engine.runtime.advance``): an ``operator`` job for each operator task the
    advance made ready (``Outcome.dispatch``), queued with the state that made it ready."""

    def contribute(self, advance):
        dispatch = advance.outcome.dispatch
        if not dispatch:
            return None

        def write(uow: UnitOfWork) -> None:
            for work in dispatch:
                jobs.enqueue(uow, advance.job.tenant_id, OPERATOR, payload={"instance_id": advance.instance_id, **work})
        return write


def _report(uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, outcome: dict[str, Any]) -> None:
    """The call's answer (or failure) goes back to the instance as an ``operator_result`` job."""
    jobs.enqueue(uow, job.tenant_id, OPERATOR_RESULT, instance_id=job.payload["instance_id"],
                 payload={"spiff_task_id": job.payload["spiff_task_id"], **outcome})
    jobs.finish(uow, job, worker_id)


def operator_tasks_to_dispatch(workflow) -> list[dict[str, Any]]:
    """Ready operator tasks not yet handed to a job; marks them so each is dispatched once."""
    found = []
    if not operators_used(workflow.spec, workflow.subprocess_specs) - {None}:
        return found  # no operator task in the process (a walk of the whole task tree otherwise)
    for task in workflow.get_tasks(state=TaskState.READY):
        operator = operator_of(task.task_spec)
        if operator and operator not in INLINE_OPERATORS and not task.internal_data.get(DISPATCHED):
            task.internal_data[DISPATCHED] = True
            found.append({"spiff_task_id": str(task.id), "operator": operator})
    return found


def build_http_call(properties: dict[str, str], variables: dict[str, Any], sandbox) -> HttpCall:
    """Render the http operator's templates (url, headers, body) against the task's variables."""
    url = sandbox.render(properties["url"], variables).strip()
    body_text = sandbox.render(properties["body"], variables) if properties.get("body") else None
    method = (properties.get("method") or ("POST" if body_text is not None else "GET")).upper()
    headers = {}
    if properties.get("headers"):
        for name, template in json.loads(properties["headers"]).items():
            headers[name] = sandbox.render(template, variables)
    if body_text is not None and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/json" if _is_json(body_text) else "text/plain; charset=utf-8"
    return HttpCall(method, url, headers, body_text.encode() if body_text is not None else None,
                    float(properties.get("timeout_s") or 10))


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except (ValueError, RecursionError):
        return False


def _origin(url: str) -> str:
    """Scheme and host only: paths and queries can hold tokens, and errors are shown to callers."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


class HttpTaskRunner:
    """Job handler for ``operator`` jobs: an HTTP task's call."""

    def __init__(self, sandbox, script_engine, spec_cache: workflows.SpecCache, outbound: OutboundHttp,
                 retry_base_s: float, lease_s: float = 30.0):
        self.sandbox = sandbox
        self.script_engine = script_engine
        self.specs = spec_cache
        self.outbound = outbound
        self.retry_base_s = retry_base_s
        self.lease_s = float(lease_s)  # beyond the call's timeout, its job's lease (BATON_JOB_LEASE_S)

    def handle(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> jobs.Then | None:
        """Build the call from the task's data, extend the lease over it (committed before the
        call), then call with no unit of work open and report the answer in the next one."""
        instance_id = job.payload["instance_id"]
        task = self._load_task(uow, instance_id, job.payload["spiff_task_id"])
        if task is None:  # the instance ended or moved on (cancelled, interrupted by a timer)
            jobs.finish(uow, job, worker_id)
            return None
        properties = task.task_spec.extensions.get("properties", {})
        retries = int(properties.get("retries") or DEFAULT_RETRIES)
        try:
            call = build_http_call(properties, dict(task.data), self.sandbox)
        except (ScriptError, ValueError) as exc:
            message = exc.message if isinstance(exc, BatonError) else f"The headers property is not valid JSON: {exc}"
            _report(uow, job, worker_id, {"ok": False, "message": f"Building the HTTP request failed: {message}",
                                          "status": None})
            return None
        jobs.extend_lease(uow, job, worker_id, call.timeout_s + self.lease_s)
        return jobs.Then(call=lambda: self._outcome(call), step=lambda uow, outcome: self._record(
            uow, job, worker_id, retries, outcome))

    def _outcome(self, call: HttpCall) -> CallFailedError | dict[str, Any]:
        try:
            return {"ok": True, "result": self._call(call)}
        except CallFailedError as failure:
            return failure

    def _record(self, uow: UnitOfWork, job: jobs.ClaimedJob, worker_id: str, retries: int,
                outcome: CallFailedError | dict[str, Any]) -> None:
        if isinstance(outcome, CallFailedError):
            if outcome.retryable and job.attempts <= retries:
                jobs.release(uow, job, worker_id, error=outcome.message,
                             delay_seconds=http_task_delay(job.attempts, self.retry_base_s, outcome.retry_after_s))
                return
            outcome = {"ok": False, "message": outcome.message, "status": outcome.status}
        _report(uow, job, worker_id, outcome)

    def give_up(self, job: jobs.ClaimedJob, worker_id: str, uow: UnitOfWork) -> None:
        _report(uow, job, worker_id, {"ok": False, "status": None,
                                      "message": "An internal error stopped this call; the instance can be retried."})

    def _load_task(self, uow: UnitOfWork, instance_id: int, spiff_task_id: str):
        row = uow.execute(
            select(Instance.tenant_id, Instance.status, Instance.state, Instance.definition_id,
                   Instance.called_definitions).where(Instance.id == instance_id)).one_or_none()
        if row is None or row.status != "running" or row.state is None:
            return None
        specs, _ = self.specs.resolve(uow, row.tenant_id, row.definition_id, row.called_definitions)
        uow.end_read()  # nothing is held while the task is rebuilt and the call goes out
        workflow = workflows.restore_workflow(row.state, specs, self.script_engine.for_tenant(row.tenant_id))
        try:
            task = workflow.get_task_from_id(UUID(spiff_task_id))
        except Exception:  # noqa: BLE001 - a task gone from the tree is simply not there any more
            return None
        return task if task.state == TaskState.READY else None

    def _call(self, call: HttpCall) -> Any:
        try:
            response = self.outbound.request(call.method, call.url, headers=call.headers, body=call.body,
                                             timeout_s=call.timeout_s)
        except OutboundRefusedError as exc:
            raise CallFailedError(exc.message, retryable=False) from None
        except OutboundError as exc:
            raise CallFailedError(exc.message, retryable=True) from None
        if not 200 <= response.status < 300:
            raise CallFailedError(f"The HTTP call to {_origin(call.url)} answered {response.status}.",
                             retryable=response.status in RETRYABLE_STATUSES,
                             retry_after_s=response.retry_after_s(), status=response.status)
        if not response.body:
            return None
        text = response.body.decode("utf-8", errors="replace")
        try:
            return json_values.parse_checked(text, "answer")
        except json_values.JsonSyntaxError:  # a non-JSON answer is kept as text
            return text
        except json_values.JsonValueError as exc:  # JSON no database or client could read back
            raise CallFailedError(f"The HTTP call to {_origin(call.url)} answered JSON that cannot be stored: "
                                  f"{exc}.", retryable=False) from None
