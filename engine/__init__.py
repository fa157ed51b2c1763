"""The engine: the only layer that advances process instances and owns their state.

A request enters in ``rpc/`` or ``channels/`` and calls a use case here; the use case writes the
state change and the job it causes in one transaction; a worker claims the job and the runner
advances the instance; calls to other servers go out from ``outbound``. The map (the layering
test, tests/unit/test_layering.py, holds every module to it):

    package     owns                                                          may import (of engine)
    (top)       use cases: auth, definitions, instances, tasks, external      anything below
                tasks, messages, webhooks, forms, insight (the console's
                views of runs), rate limits, retention, gauges read at
                scrape time, errors, json_values
    telemetry/  metrics (counters, histograms, their multiprocess files),     nothing
                the ids a log line carries, the log format
    store/      models, database setup, the one write path, paging,           errors, telemetry
                instance state and its version
    jobs/       the queue (claim, finish, retry policy), job kinds, wakers,   errors, store, telemetry
                the NOTIFY listener, the worker pool and worker processes
    sandbox/    expressions, script hosts and their protocol, the             errors, telemetry
                SpiffWorkflow script engine
    outbound/   the SSRF guard, HTTP calls, signed durable delivery,          errors, store, jobs, telemetry
                HTTP service tasks
    chat/       channel configurations, conversations, the outbox of an       errors, store, jobs, outbound,
                advance, AI dialogs, messengers                               telemetry
    runtime/    the runner (the only code that steps SpiffWorkflow), events,  errors, store, jobs, sandbox,
                stepping and guardrails, outcome, human-task and external-     outbound, chat, telemetry
                task rows, event subscriptions, message and signal routing,
                timer starts

``json_values`` (the top's JSON limits and the strict reader every door uses) is, like ``errors``,
a leaf every sub-package but telemetry may import (left out of the column above).

Nothing in engine/ imports ``rpc``, ``channels``, ``console``, ``app`` or ``cli``; only ``store`` touches
Flask (the database extension lives there). ``bpmn/`` imports only ``errors`` and ``sandbox`` of
the engine; ``ai/`` imports nothing of Baton.
"""

# What each sub-package may import of engine/ (itself always); "top" is engine's own modules.
LAYERS = {
    "telemetry": (),
    "store": ("errors", "json_values", "telemetry"),
    "jobs": ("errors", "json_values", "store", "telemetry"),
    "sandbox": ("errors", "json_values", "telemetry"),
    "outbound": ("errors", "json_values", "store", "jobs", "telemetry"),
    "chat": ("errors", "json_values", "store", "jobs", "outbound", "telemetry"),
    "runtime": ("errors", "json_values", "store", "jobs", "sandbox", "outbound", "chat", "telemetry"),
}
