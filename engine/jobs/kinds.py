"""Every kind of job, by name: what the queue carries and which handler runs it.

Instance jobs (their instance's jobs run one at a time, in order) are handled by the runner
(``runtime.runner.Runner``); the others by their own handlers: ``timer_start``
(``runtime.timer_starts.TimerStartRunner``), ``operator`` (``outbound.http_tasks.HttpTaskRunner``),
``deliver`` (``outbound.delivery_runner.DeliveryRunner``), ``ai_turn`` (``chat.ai_turns.AiTurnRunner``),
``thrown`` (``runtime.routing.ThrownRunner``), ``retention`` (``retention.RetentionRunner``).
``app.Baton`` maps each kind to its handler.
"""
from __future__ import annotations

# Instance jobs: events the runner applies to an instance.
START = "start"                      # a new instance's first advance
TIMER = "timer"                      # the instance's earliest waiting timer is due
MESSAGE = "message"                  # process.message delivered a named message
RETRY = "retry"                      # process.retry resumes a failed instance
COMPLETE_TASK = "complete_task"      # a human task was completed
OPERATOR_RESULT = "operator_result"  # an HTTP task's answer (or failure) comes back
CHAT_MESSAGE = "chat_message"        # a customer's message for the instance (also a BPMN message name)
AI_RESULT = "ai_result"              # an AI chat step ended
EXTERNAL_RESULT = "external_result"  # a worker completed an external task, failed it for good or threw a BPMN error
SIGNAL = "signal"                    # a broadcast signal for an instance that waits for it
REPAIR = "repair"                    # process.set_variables, process.skip or process.rewind (engine.repairs)
INSTANCE_KINDS = (START, TIMER, MESSAGE, RETRY, COMPLETE_TASK, OPERATOR_RESULT, CHAT_MESSAGE, AI_RESULT,
                  EXTERNAL_RESULT, SIGNAL, REPAIR)

# Other jobs.
TIMER_START = "timer_start"          # a timer start event of a definition is due
OPERATOR = "operator"                # an HTTP task calls out
DELIVER = "deliver"                  # a signed outbound delivery (chat answer, CRM event)
AI_TURN = "ai_turn"                  # an AI dialog answers the customer's pending messages
THROWN = "thrown"                    # the messages and signals one advance threw, for other instances
RETENTION = "retention"              # the recurring purge of what ended long ago (engine.retention)

# Kinds that wait on another server: run by call threads, so a slow model or receiver never
# holds up the engine threads (timers, starts, other chats).
CALL_KINDS = frozenset({OPERATOR, AI_TURN, DELIVER})
