"""An AI turn starts two ways, and both must leave the same rows: the turn of a step that has just
opened is handed to a call thread of the worker process that opened it, its messages taken in
the very save transaction that opened it (``AiTurnRunner.prepare``); a turn for a later message
is queued by a web process that runs no workers, claimed by a worker and takes its messages in a
transaction of its own (``AiTurnRunner._claim``).

The server runs waitress with supervised worker processes (``BATON_WORKER_PROCESSES=2``; in the
default topology each serving process runs its own workers, so its turns are all handed over), the
model is slow, and while each turn waits for the model the test reads the dialog's busy mark and
the turn's job row."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, func, select

from engine.store.models import AiDialog, Job, Message

from tests.conftest import make_database_url
from tests.harness import bpmn, server_with_model
from tests.integration.test_webchat import accepted, create_channel, eventually

pytestmark = pytest.mark.slow  # a server with worker processes of its own

AI_TIMEOUT_S = 3


@pytest.fixture
def server_with_worker_processes(backend, tmp_path_factory):
    with server_with_model(make_database_url(backend, tmp_path_factory), tmp_path_factory.mktemp("ai-paths"),
                           BATON_WORKER_PROCESSES="2", BATON_AI_TIMEOUT_S=str(AI_TIMEOUT_S),
                           BATON_AI_RETRIES="0") as (server, fake, receiver):
        server.start()
        yield server, fake, receiver


def _busy_turn(database_url: str) -> dict:
    """The busy dialog's mark and its turn job's row, read while the model thinks (through the
    tables' own column types: timestamps and JSON read alike on both databases)."""
    dialogs, jobs, messages = AiDialog.__table__, Job.__table__, Message.__table__
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            dialog = connection.execute(
                select(dialogs.c.id, dialogs.c.busy_job_id, dialogs.c.busy_until, dialogs.c.answered_through,
                       dialogs.c.status).where(dialogs.c.busy_job_id.is_not(None))).one()._asdict()
            job = connection.execute(
                select(jobs.c.kind, jobs.c.attempts, jobs.c.locked_by, jobs.c.locked_until, jobs.c.instance_id,
                       jobs.c.payload).where(jobs.c.id == dialog["busy_job_id"])).one()._asdict()
            last_in = connection.execute(select(func.max(messages.c.id)).where(messages.c.direction == "in")
                                         ).scalar_one()
    finally:
        engine.dispose()
    return {"dialog": dialog, "job": job, "last_in": last_in}


def test_a_turn_prepared_in_the_save_leaves_the_rows_a_claimed_turn_leaves(server_with_worker_processes):
    server, fake, receiver = server_with_worker_processes
    api = server.api(server.create_tenant(f"paths-{uuid.uuid4().hex[:8]}"))
    channel = create_channel(api, webhook_url=receiver.url + "/chat")
    api.deploy(bpmn("chat_ai.bpmn").replace("__CHANNEL__", str(channel["config_id"]))
               .replace("__MAX_TURNS__", "10").replace("__MODEL__", ""), code=f"paths-{uuid.uuid4().hex[:6]}")
    key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
    chat_id = f"chat-{uuid.uuid4().hex[:8]}"
    fake.delay = 1.5

    def turn(text_: str, answers_before: int) -> dict:
        accepted(server, key, channel["config_id"], chat_id=chat_id, text=text_)
        fake.wait_for_requests(answers_before + 1, timeout=20)
        seen = _busy_turn(server.database_url)
        eventually(lambda: [r for r in list(receiver.requests) if r.json()["text"].endswith(": " + text_)], bool)
        return seen

    prepared = turn("first question", 0)    # the step opens: the turn is prepared in the save
    claimed = turn("second question", 1)    # the web process queues it; a worker claims it

    for seen in (prepared, claimed):
        dialog, job = seen["dialog"], seen["job"]
        assert dialog["status"] == "active"
        assert (job["kind"], job["attempts"], job["instance_id"]) == ("ai_turn", 1, None)
        assert job["payload"]["dialog_id"] == dialog["id"]
        # The job's lease is the busy mark's: the model's bound plus the margin, from the same moment.
        assert abs(job["locked_until"] - dialog["busy_until"]) < timedelta(seconds=1)
        assert dialog["answered_through"] < seen["last_in"]   # marked answered only once answered
    assert prepared["dialog"]["id"] == claimed["dialog"]["id"]
    assert prepared["job"]["locked_by"].endswith(":ch")       # handed over to a call pool ...
    assert not claimed["job"]["locked_by"].endswith(":ch")    # ... and claimed by a call thread

    # The model read the same history either way: the first turn the opening question, the second
    # that question, its answer and the new one.
    first, second = fake.requests[0], fake.requests[1]
    assert [m["role"] for m in first["messages"]][-1:] == ["user"]
    assert [m["role"] for m in second["messages"]][-3:] == ["user", "assistant", "user"]
    assert first["messages"][-1]["content"] == "first question"
    assert [m["content"] for m in second["messages"]][-3::2] == ["first question", "second question"]
