"""external.* methods (permission group ``external.*``): Camunda's external-task vocabulary for
workers (docs/api.md, "External tasks")."""
from __future__ import annotations

from engine import external_tasks
from engine.errors import InvalidParamsError
from engine.jobs.retry import EXTERNAL_RETRY_MAX_MS
from engine.jobs.wakers import LongPoll
from rpc.params import (optional_dict, optional_int, optional_one_of, optional_str, page_params, reject_unknown,
                        require_int, require_list, require_str)
from rpc.registry import RpcMethod

MAX_LOCK_MS = 24 * 3600 * 1000    # a day
MAX_WAIT_MS = 60_000              # a long poll answers within a minute
MAX_TASKS = 100
MAX_TOPICS = 50


def _worker(params) -> str:
    return require_str(params, "worker_id", max_len=64)


def _topics(params) -> dict[str, int]:
    topics = require_list(params, "topics")
    if not 1 <= len(topics) <= MAX_TOPICS:
        raise InvalidParamsError(f"Parameter 'topics' must hold 1 to {MAX_TOPICS} topics.", data={"param": "topics"})
    found = {}
    for index, topic in enumerate(topics):
        where = f"topics[{index}]"
        if not isinstance(topic, dict):
            raise InvalidParamsError(f"Parameter '{where}' must be an object {{name, lock_duration_ms}}.",
                                     data={"param": where})
        reject_unknown(topic, {"name", "lock_duration_ms"})
        name = require_str({where + ".name": topic.get("name")}, where + ".name", max_len=255)
        found[name] = require_int({where + ".lock_duration_ms": topic.get("lock_duration_ms")},
                                  where + ".lock_duration_ms", minimum=1, maximum=MAX_LOCK_MS)
    return found


def fetch_and_lock(ctx, params):
    reject_unknown(params, {"worker_id", "topics", "max_tasks", "wait_ms"})
    return external_tasks.fetch_and_lock(ctx.uow,
        ctx.tenant_id, _worker(params), _topics(params),
        max_tasks=optional_int(params, "max_tasks", 10, minimum=1, maximum=MAX_TASKS),
        wait_ms=optional_int(params, "wait_ms", 0, minimum=0, maximum=MAX_WAIT_MS),
        long_poll=ctx.long_poll or LongPoll(1))  # an app without one (tests) polls, unwoken


def complete(ctx, params):
    reject_unknown(params, {"task_id", "worker_id", "variables"})
    return external_tasks.complete(ctx.uow, ctx.tenant_id, require_int(params, "task_id"), _worker(params),
                                   optional_dict(params, "variables") or {})


def failure(ctx, params):
    reject_unknown(params, {"task_id", "worker_id", "message", "retries", "retry_timeout_ms"})
    return external_tasks.failure(ctx.uow,
        ctx.tenant_id, require_int(params, "task_id"), _worker(params), require_str(params, "message", max_len=2000),
        require_int(params, "retries", minimum=0, maximum=1000),
        optional_int(params, "retry_timeout_ms", 0, minimum=0, maximum=EXTERNAL_RETRY_MAX_MS))


def bpmn_error(ctx, params):
    reject_unknown(params, {"task_id", "worker_id", "error_code", "message", "variables"})
    return external_tasks.bpmn_error(ctx.uow,
        ctx.tenant_id, require_int(params, "task_id"), _worker(params), require_str(params, "error_code", max_len=255),
        optional_str(params, "message", max_len=2000), optional_dict(params, "variables") or {})


def extend_lock(ctx, params):
    reject_unknown(params, {"task_id", "worker_id", "lock_duration_ms"})
    return external_tasks.extend_lock(ctx.uow, ctx.tenant_id, require_int(params, "task_id"), _worker(params),
                                      require_int(params, "lock_duration_ms", minimum=1, maximum=MAX_LOCK_MS))


def list_(ctx, params):
    reject_unknown(params, {"status", "topic", "instance_id", "page", "per_page"})
    page, per_page = page_params(params)
    return external_tasks.list_tasks(ctx.uow,
        ctx.tenant_id, status=optional_one_of(params, "status", external_tasks.STATUSES),
        topic=optional_str(params, "topic", max_len=255), instance_id=optional_int(params, "instance_id", minimum=1),
        page=page, per_page=per_page)


METHODS = (
    RpcMethod("external.fetch_and_lock", fetch_and_lock),
    RpcMethod("external.complete", complete),
    RpcMethod("external.failure", failure),
    RpcMethod("external.bpmn_error", bpmn_error),
    RpcMethod("external.extend_lock", extend_lock),
    RpcMethod("external.list", list_),
)
