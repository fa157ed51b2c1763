"""external.* methods (permission group ``external.*``): Camunda's external-task vocabulary for
workers (docs/api.md, "External tasks")."""
from __future__ import annotations

from engine import external_tasks
from engine.jobs.retry import EXTERNAL_RETRY_MAX_MS
from engine.jobs.wakers import LongPoll
from rpc.registry import RpcMethod
from rpc.schema import (BOOL, ID, INT, OBJECT, PAGING, TEXT, TIME, Choice, Integer, JsonObject, ListOf, Param,
                        Record, Text, array, nullable, obj, one_of, page_of)

MAX_LOCK_MS = 24 * 3600 * 1000    # a day
MAX_WAIT_MS = 60_000              # a long poll answers within a minute
MAX_TASKS = 100
MAX_TOPICS = 50


def fetch_and_lock(ctx, params):
    topics = {topic["name"]: topic["lock_duration_ms"] for topic in params["topics"]}
    return external_tasks.fetch_and_lock(ctx.uow, ctx.tenant_id, params["worker_id"], topics,
                                         max_tasks=params["max_tasks"], wait_ms=params["wait_ms"],
                                         long_poll=ctx.long_poll or LongPoll(1))  # an app without one (tests) polls


def complete(ctx, params):
    return external_tasks.complete(ctx.uow, ctx.tenant_id, params["task_id"], params["worker_id"],
                                   params.get("variables") or {})


def failure(ctx, params):
    return external_tasks.failure(ctx.uow, ctx.tenant_id, params["task_id"], params["worker_id"], params["message"],
                                  params["retries"], params["retry_timeout_ms"])


def bpmn_error(ctx, params):
    return external_tasks.bpmn_error(ctx.uow, ctx.tenant_id, params["task_id"], params["worker_id"],
                                     params["error_code"], params.get("message"), params.get("variables") or {})


def extend_lock(ctx, params):
    return external_tasks.extend_lock(ctx.uow, ctx.tenant_id, params["task_id"], params["worker_id"],
                                      params["lock_duration_ms"])


def list_(ctx, params):
    return external_tasks.list_tasks(ctx.uow, ctx.tenant_id, status=params.get("status"), topic=params.get("topic"),
                                     instance_id=params.get("instance_id"), page=params["page"],
                                     per_page=params["per_page"])


TASK = Param("task_id", ID, required=True)
WORKER = Param("worker_id", Text(max_len=64), required=True, description="names the worker that holds the lock")
LOCK = Integer(minimum=1, maximum=MAX_LOCK_MS)
VARIABLES = Param("variables", JsonObject(), description="become the instance's variables")
FETCHED = obj(task_id=INT, topic=TEXT, instance_id=INT, definition_id=INT, element_id=TEXT,
              worker_id=nullable(TEXT), lock_expires_at=nullable(TIME), retries=nullable(INT),
              error_message=nullable(TEXT), variables=OBJECT)
LISTED = {**FETCHED, "properties": {**FETCHED["properties"], "status": one_of(*external_tasks.STATUSES),
                                    "retry_at": nullable(TIME), "created_at": TIME, "completed_at": nullable(TIME)}}
REPORTED = obj(task_id=INT, status=one_of("completed"), instance_id=INT)

METHODS = (
    RpcMethod("external.fetch_and_lock", fetch_and_lock, summary="Fetch and lock open external tasks of some topics, "
              "waiting up to wait_ms for one (long polling).",
              params=(WORKER,
                      Param("topics", ListOf(Record((Param("name", Text(max_len=255), required=True),
                                                     Param("lock_duration_ms", LOCK, required=True))),
                                             min_items=1, max_items=MAX_TOPICS, noun="topics"), required=True),
                      Param("max_tasks", Integer(minimum=1, maximum=MAX_TASKS), default=10),
                      Param("wait_ms", Integer(minimum=0, maximum=MAX_WAIT_MS), default=0,
                            description="how long to wait for a task when none is open")),
              result=obj(tasks=array(FETCHED))),
    RpcMethod("external.complete", complete, summary="Complete a locked external task.",
              params=(TASK, WORKER, VARIABLES), result=REPORTED),
    RpcMethod("external.failure", failure, summary="Report a failure: retried later, or with no retries left an "
              "incident that fails the instance.",
              params=(TASK, WORKER, Param("message", Text(max_len=2000), required=True),
                      Param("retries", Integer(minimum=0, maximum=1000), required=True,
                            description="how many more tries the task gets"),
                      Param("retry_timeout_ms", Integer(minimum=0, maximum=EXTERNAL_RETRY_MAX_MS), default=0)),
              result=obj(task_id=INT, status=one_of("open"), instance_id=INT, retries=INT, retry_at=nullable(TIME),
                         instance_fails=BOOL)),
    RpcMethod("external.bpmn_error", bpmn_error, summary="End a locked external task with a BPMN error that an "
              "error boundary event of the task catches.",
              params=(TASK, WORKER, Param("error_code", Text(max_len=255), required=True),
                      Param("message", Text(max_len=2000)), VARIABLES),
              result=REPORTED),
    RpcMethod("external.extend_lock", extend_lock, summary="Extend the lock a worker holds, from now.",
              params=(TASK, WORKER, Param("lock_duration_ms", LOCK, required=True)),
              result=obj(task_id=INT, worker_id=TEXT, lock_expires_at=TIME)),
    RpcMethod("external.list", list_, summary="External tasks, newest first.",
              params=(Param("status", Choice(external_tasks.STATUSES)), Param("topic", Text(max_len=255)),
                      Param("instance_id", ID), *PAGING),
              result=page_of(LISTED)),
)
