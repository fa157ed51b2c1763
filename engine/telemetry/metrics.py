"""Every counter and histogram Baton records, defined once (docs/operations.md lists them).

Each is recorded where its event happens, in one place: the runner's save (instances, advances),
the worker loop (retries, give-ups), the delivery record, the AI turn, the sandbox, the WSGI
request layer, the webhook doors and the rate limits. Gauges that describe the database (queue
depth, instances by status) are not here: they are read at scrape time (``engine.gauges``).

The values live in per-process files (``metrics_dir``), summed over the processes of a server by
its ``/metrics``.
"""
from __future__ import annotations

from engine.telemetry import metrics_dir

DIRECTORY = metrics_dir.prepare()  # before prometheus_client is imported: it decides at import

from prometheus_client import Counter, Histogram  # noqa: E402

# Buckets (seconds) where the default ones (5 ms .. 10 s) do not fit what is measured.
_SCRIPT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
_AI_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
_DELIVERY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 21600, 86400)

# -- instances (engine.runtime.runner, engine.instances, engine.runtime.routing) --
INSTANCES_STARTED = Counter(
    "baton_instances_started_total", "Instances whose first advance was saved, by definition code.", ["code"])
INSTANCES_ENDED = Counter(
    "baton_instances_ended_total",
    "Instances that ended, by definition code and how (completed, failed, cancelled).", ["code", "status"])
ADVANCE_SECONDS = Histogram(
    "baton_advance_duration_seconds", "One advance of an instance (read, run, save), by job kind.", ["kind"])

# -- transactions (engine.store.unit_of_work) --
TRANSACTIONS = Counter(
    "baton_transactions_total",
    "Units of work committed, by owner (rpc, a door, claim, job:<kind>, batch, cli ...).", ["owner"])

# -- jobs (engine.jobs.worker) --
JOB_RETRIES = Counter(
    "baton_job_retries_total", "Jobs whose handler raised and that will be tried again, by kind.", ["kind"])
JOB_GIVE_UPS = Counter(
    "baton_job_give_ups_total", "Jobs whose handler kept raising until the worker gave up, by kind.", ["kind"])

# -- deliveries (engine.outbound.delivery_runner) --
DELIVERY_ATTEMPTS = Counter(
    "baton_delivery_attempts_total",
    "Delivery attempts by outcome: sent, retry (on the schedule), wait (the receiver asked), dead.", ["outcome"])
DELIVERIES_DEAD = Counter(
    "baton_deliveries_dead_total", "Deliveries that became dead (retries used up, refused, or an internal error).")
DELIVERY_LATENCY = Histogram(
    "baton_delivery_latency_seconds", "From a delivery's creation to the attempt that sent it.",
    buckets=_DELIVERY_BUCKETS)

# -- AI turns (engine.chat.ai_dialogs) and scripts (engine.sandbox) --
AI_TURN_SECONDS = Histogram(
    "baton_ai_turn_duration_seconds", "One model call of an AI chat turn, by outcome (answered, handoff, failed).",
    ["outcome"], buckets=_AI_BUCKETS)
SCRIPT_SECONDS = Histogram(
    "baton_script_duration_seconds", "One sandboxed script run, by outcome (ok, error, limit).", ["outcome"],
    buckets=_SCRIPT_BUCKETS)
SCRIPT_HOST_STARTS = Counter(
    "baton_script_host_starts_total", "Script host processes started, by why the tenant's previous one ended "
    "(new: first script of a tenant in this pool; recycled: after BATON_SCRIPT_HOST_RUNS scripts; limit: a script "
    "broke a limit; evicted: its place went to another tenant; crashed; closed).", ["reason"])

# -- inbound HTTP (channels) --
HTTP_REQUESTS = Counter(
    "baton_http_requests_total", "HTTP requests answered, by route, method and status.", ["route", "method", "status"])
HTTP_SECONDS = Histogram(
    "baton_http_request_duration_seconds", "Time to produce an HTTP answer, by route.", ["route"])
WEBHOOK_REFUSALS = Counter(
    "baton_webhook_refusals_total", "Inbound webhook calls refused, by the error's reason.", ["reason"])
RATE_LIMITED = Counter(
    "baton_rate_limited_total", "Requests refused with 429 by a rate limit (api_key or webhook).", ["limit"])

# -- retention (engine.retention) --
RETENTION_REMOVED = Counter(
    "baton_retention_removed_total", "Rows removed by retention (the job or the command), by table.", ["table"])
