"""The ai_chat step end to end: a real server, a real webhook receiver, and a local
server speaking OpenAI's chat-completions protocol reached through the real ``openai`` client."""
from __future__ import annotations

import json
import re
import time
import uuid

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.conftest import make_database_url
from tests.fake_openai import FakeOpenAI
from tests.harness import BatonServer, bpmn, drop_postgres_database
from tests.integration.test_webchat import accepted, conversations_on, create_channel, eventually, post_message

MODEL_KEY = "sk-test-" + uuid.uuid4().hex
AI_TIMEOUT_S = 3


# -- fixtures: a server of its own, configured with the fake model --------------------------------

@pytest.fixture(scope="module")
def fake_model():
    fake = FakeOpenAI(api_key=MODEL_KEY)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def ai_server(backend, tmp_path_factory, fake_model):
    url = make_database_url(backend, tmp_path_factory)
    server = BatonServer(url, tmp_path_factory.mktemp("ai-server"), BATON_AI_BASE_URL=fake_model.base_url,
                         BATON_AI_MODEL="fake-model", BATON_AI_API_KEY=MODEL_KEY,
                         BATON_AI_TIMEOUT_S=str(AI_TIMEOUT_S), BATON_AI_RETRIES="1",
                         BATON_DELIVERY_RETRY_SCALE="0.01").start()
    yield server
    server.stop()
    if backend == "postgresql":
        drop_postgres_database(url)


@pytest.fixture(scope="module")
def ai_api(ai_server):
    return ai_server.api(ai_server.create_tenant(f"ai-{uuid.uuid4().hex[:8]}"))


@pytest.fixture
def model(fake_model):
    """The fake model, fresh for each test: no recorded requests, no scripted failures, no delay."""
    fake_model.requests.clear()
    fake_model.delay = 0
    fake_model.slow_seconds = 2.0
    fake_model.brain = fake_model.default_brain
    return fake_model


@pytest.fixture
def chat(ai_server, ai_api, receiver):
    return Chat(ai_server, ai_api, receiver)


class Chat:
    """One web-chat channel bound to an ai_chat process, a customer, and what reached the receiver."""

    def __init__(self, server, api, receiver):
        self.server, self.api, self.receiver = server, api, receiver
        self.channel = create_channel(api, webhook_url=receiver.url + "/chat")
        self.key = api.call("apikey.create", name="site", permissions=["conversation.send"])["api_key"]
        self.chat_id = f"chat-{uuid.uuid4().hex[:8]}"
        self.instance_id = self.binding_id = None

    def deploy(self, max_turns: int = 10, model: str | None = None, fixture: str = "chat_ai.bpmn") -> dict:
        xml = (bpmn(fixture).replace("__CHANNEL__", str(self.channel["config_id"]))
               .replace("__MAX_TURNS__", str(max_turns))
               .replace("__MODEL__", f'<camunda:property name="model" value="{model}" />' if model else ""))
        return self.api.deploy(xml, code=f"ai-{uuid.uuid4().hex[:8]}")

    def say(self, text_: str) -> dict:
        answer = accepted(self.server, self.key, self.channel["config_id"], chat_id=self.chat_id, text=text_,
                          username="Zoë")
        self.instance_id, self.binding_id = answer["instance_id"], answer["binding_id"]
        return answer

    def texts(self) -> list[str]:
        return [r.json()["text"] for r in list(self.receiver.requests) if r.json().get("chat_id") == self.chat_id]

    def wait_for_texts(self, count: int, timeout: float = 20.0) -> list[str]:
        return eventually(self.texts, lambda texts: len(texts) >= count, timeout)

    def open_task(self) -> dict:
        [task] = eventually(lambda: self.api.call("task.list", instance_id=self.instance_id,
                                                  status="in_progress")["items"], bool)
        return task

    def messages(self) -> list[dict]:
        items = self.api.call("conversation.messages", binding_id=self.binding_id, per_page=100)["items"]
        return list(reversed(items))


def ai_answer_to(text_: str) -> re.Pattern:
    return re.compile(rf"AI #\d+: {re.escape(text_)}")


def roles(request_body: dict) -> list[str]:
    return [m["role"] for m in request_body["messages"]]


def instance_row(server, instance_id: int):
    engine = create_engine(server.database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(text("SELECT revision, state FROM instances WHERE id = :id"),
                                      {"id": instance_id}).one()
    finally:
        engine.dispose()


# -- the seed flow ---------------------------------------------------------------------------------

def test_the_ai_answers_until_the_customer_asks_for_a_person_then_an_operator_closes_the_chat(chat, model):
    chat.deploy()
    chat.say("Hi, where is my order?")
    [first] = chat.wait_for_texts(1)
    assert ai_answer_to("Hi, where is my order?").fullmatch(first)
    chat.say("It is order 42")
    assert ai_answer_to("It is order 42").fullmatch(chat.wait_for_texts(2)[1])
    chat.say("Can I talk to a person please?")
    assert chat.wait_for_texts(3)[2] == "Let me find a colleague for you."

    task = chat.open_task()
    assert task["element_id"] == "operator" and task["binding_id"] == chat.binding_id
    assert {k: task["variables"][k] for k in ("ai_outcome", "ai_last_answer", "ai_handoff_reason", "message_text")} == {
        "ai_outcome": "handoff", "ai_last_answer": "Let me find a colleague for you.",
        "ai_handoff_reason": "customer asked for a person", "message_text": "Can I talk to a person please?"}

    # The model got the whole dialog each time: the system prompt (rendered, with the knowledge),
    # then the customer's and its own messages in order.
    assert len(model.requests) == 3
    second = model.requests[1]
    assert second["model"] == "fake-model"
    assert roles(second) == ["system", "user", "assistant", "user"]
    system = second["messages"][0]["content"]
    assert "The customer is Zoë." in system and "Delivery takes 3 to 5 working days" in system
    assert [m["content"] for m in second["messages"][1:]] == ["Hi, where is my order?", first, "It is order 42"]
    assert any(tool["function"]["name"] == "handoff_to_operator" for tool in second["tools"])

    chat.api.call("conversation.send", binding_id=chat.binding_id, text="Hi, I'm Anna from Acme.")
    assert chat.wait_for_texts(4)[3] == "Hi, I'm Anna from Acme."
    chat.api.call("task.complete", task_id=task["task_id"], result={})
    assert chat.api.wait_for(chat.instance_id)["status"] == "completed"
    assert conversations_on(chat.api, chat.channel["config_id"]) == []
    assert [(m["direction"], m["author"]) for m in chat.messages()] == [
        ("in", "customer"), ("out", "ai"), ("in", "customer"), ("out", "ai"), ("in", "customer"), ("out", "ai"),
        ("out", "operator")]


def test_a_long_dialog_is_one_waiting_step_and_never_touches_the_process_state(chat, model):
    chat.deploy(max_turns=50)
    chat.say("question 0")
    chat.wait_for_texts(1)
    before = instance_row(chat.server, chat.instance_id)
    for turn in range(1, 8):
        chat.say(f"question {turn}")
        assert ai_answer_to(f"question {turn}").fullmatch(chat.wait_for_texts(turn + 1)[turn])
    metrics = requests.get(chat.server.base_url + "/metrics", timeout=10).text
    assert re.search(r"^baton_ai_dialogs_active [1-9]\d*(\.0)?$", metrics, re.MULTILINE), metrics
    after = instance_row(chat.server, chat.instance_id)
    assert (after.revision, after.state) == (before.revision, before.state)
    waiting = chat.api.call("process.status", instance_id=chat.instance_id)["waiting_for"]
    assert waiting == [{"element_id": "assistant", "kind": "serviceTask", "operator": "ai_chat"}]
    assert len(model.requests[-1]["messages"]) == 1 + 2 * 8 - 1  # system + 8 questions + 7 answers


def test_after_the_process_greets_the_step_waits_for_the_customer_instead_of_answering_the_first_message(
        chat, model):
    chat.deploy(fixture="chat_ai_greeting.bpmn")  # start -> send_message greeting -> ai_chat
    chat.say("hi")
    assert chat.wait_for_texts(1) == ["Hello Zoë! Ask me anything."]
    chat.api.wait_until_idle()
    assert model.requests == [] and len(chat.texts()) == 1
    chat.say("How long does delivery take?")
    assert ai_answer_to("How long does delivery take?").fullmatch(chat.wait_for_texts(2)[1])
    [request] = model.requests
    assert [(m["role"], m["content"]) for m in request["messages"][1:]] == [
        ("user", "hi"), ("assistant", "Hello Zoë! Ask me anything."), ("user", "How long does delivery take?")]


def test_every_dialog_of_a_step_shares_one_stored_copy_of_its_knowledge(ai_server, ai_api, receiver, model):
    first, second = Chat(ai_server, ai_api, receiver), Chat(ai_server, ai_api, receiver)
    first.deploy()
    second.deploy()
    for chat in (first, second):
        chat.say("hello")
        chat.wait_for_texts(1)
    engine = create_engine(ai_server.database_url)
    try:
        with engine.connect() as connection:
            dialogs = connection.execute(text(
                "SELECT count(*), count(DISTINCT knowledge_id) FROM ai_dialogs WHERE instance_id IN (:a, :b)"),
                {"a": first.instance_id, "b": second.instance_id}).one()
            stored = connection.execute(text(
                "SELECT count(*) FROM ai_knowledge k JOIN ai_dialogs d ON d.knowledge_id = k.id "
                "WHERE d.instance_id = :a"), {"a": first.instance_id}).scalar_one()
    finally:
        engine.dispose()
    assert tuple(dialogs) == (2, 1) and stored == 1
    assert "Delivery takes 3 to 5 working days" in model.requests[-1]["messages"][0]["content"]


# -- handoff paths -----------------------------------------------------------------------------------

def test_a_handoff_that_names_a_group_gives_the_conversation_and_the_operator_task_to_that_group(chat, model):
    xml = (bpmn("chat_ai.bpmn").replace("__CHANNEL__", str(chat.channel["config_id"])).replace("__MAX_TURNS__", "10")
           .replace("__MODEL__", '<camunda:property name="handoff_groups" value="billing, shipping" />')
           .replace('<bpmn:userTask id="operator" name="Answer the customer" />',
                    '<bpmn:userTask id="operator" name="Answer the customer" '
                    'camunda:candidateGroups="${ai_handoff_group}" />'))
    chat.api.deploy(xml, code=f"ai-{uuid.uuid4().hex[:8]}")
    model.brain = lambda body: {"content": "Our billing team will take over.", "handoff": True,
                                "arguments": json.dumps({"reason": "a wrong invoice", "group": "billing"})}
    chat.say("My invoice is wrong")
    task = chat.open_task()
    assert task["candidate_groups"] == ["billing"]
    assert task["variables"]["ai_handoff_group"] == "billing"
    [conversation] = [c for c in chat.api.call("conversation.list", candidate_group="billing")["items"]
                      if c["binding_id"] == chat.binding_id]
    assert conversation["candidate_group"] == "billing" and conversation["assignee"] is None
    offered = model.requests[-1]["tools"][0]["function"]["parameters"]["properties"]["group"]
    assert offered["enum"] == ["billing", "shipping"]


def test_a_handoff_keyword_ends_the_step_without_asking_the_model(chat, model):
    chat.deploy()
    chat.say("hello")
    chat.wait_for_texts(1)
    chat.say("I want a REFUND now")
    task = chat.open_task()
    assert task["variables"]["ai_outcome"] == "keyword"
    assert task["variables"]["ai_handoff_reason"] == "The customer wrote 'refund'."
    assert task["variables"]["ai_last_answer"] == chat.texts()[0]
    assert len(model.requests) == 1 and len(chat.texts()) == 1


def test_max_turns_ends_the_step_after_that_many_answers_and_the_process_says_goodbye(chat, model):
    chat.deploy(max_turns=2)
    chat.say("one")
    chat.wait_for_texts(1)
    chat.say("two")
    texts = chat.wait_for_texts(3)
    assert ai_answer_to("two").fullmatch(texts[1]) and texts[2] == "Thanks for chatting, Zoë!"
    status = chat.api.wait_for(chat.instance_id)
    assert status["status"] == "completed" and status["variables"]["ai_outcome"] == "max_turns"
    assert status["variables"]["ai_last_answer"] == texts[1]
    assert conversations_on(chat.api, chat.channel["config_id"]) == []


def test_a_failing_model_is_retried_then_the_step_hands_over_with_error(chat, model):
    chat.deploy()
    model.fail_next(500, times=2)  # the first call and its one retry (BATON_AI_RETRIES=1)
    chat.say("anyone there?")
    task = chat.open_task()
    assert task["variables"]["ai_outcome"] == "error" and "500" in task["variables"]["ai_error"]
    assert task["variables"]["ai_last_answer"] is None
    assert len(model.requests) == 2 and chat.texts() == []


def test_a_model_that_does_not_answer_in_time_hands_over_with_error(chat, model):
    chat.deploy()
    model.hang_next(AI_TIMEOUT_S + 2, times=2)
    chat.say("hello?")
    task = eventually(chat.open_task, lambda t: True, timeout=30)
    assert task["variables"]["ai_outcome"] == "error"
    assert "did not answer within" in task["variables"]["ai_error"]
    assert MODEL_KEY not in str(task["variables"]) and chat.texts() == []


# -- concurrency -------------------------------------------------------------------------------------

def test_messages_that_arrive_during_a_slow_answer_are_answered_next_in_order(chat, model):
    chat.deploy()
    model.slow_seconds = 1.5
    chat.say("a slow question")
    model.wait_for_requests(1, timeout=20)
    chat.say("second")
    chat.say("third")
    first, second = chat.wait_for_texts(2)
    assert ai_answer_to("a slow question").fullmatch(first) and ai_answer_to("third").fullmatch(second)
    chat.api.wait_until_idle()
    assert len(model.requests) == 2 and len(chat.texts()) == 2
    follow_up = model.requests[1]
    assert [m["content"] for m in follow_up["messages"][1:]] == ["a slow question", first, "second", "third"]
    assert ([m["author"] for m in chat.messages()] == ["customer", "customer", "customer", "ai", "ai"]
            or [m["author"] for m in chat.messages()] == ["customer", "ai", "customer", "customer", "ai"])


def test_slow_model_calls_do_not_hold_up_other_chats(ai_server, ai_api, receiver, model):
    """Model calls run on their own threads (BATON_CALL_THREADS), more than the engine's two."""
    model.slow_seconds = 2.5
    slow = [Chat(ai_server, ai_api, receiver) for _ in range(3)]
    fast = Chat(ai_server, ai_api, receiver)
    for chat in (*slow, fast):
        chat.deploy()
    for chat in slow:
        chat.say("slow: check my three orders")
    model.wait_for_requests(3, timeout=20)
    started = time.monotonic()
    fast.say("quick question")
    assert ai_answer_to("quick question").fullmatch(fast.wait_for_texts(1, timeout=10)[0])
    assert time.monotonic() - started < 2.0
    assert all(chat.texts() == [] for chat in slow)  # still thinking
    for chat in slow:
        assert ai_answer_to("slow: check my three orders").fullmatch(chat.wait_for_texts(1)[0])


def test_the_model_call_holds_no_lock_a_cancel_during_it_is_immediate_and_its_answer_is_dropped(chat, model):
    chat.deploy()
    model.slow_seconds = 2.0
    chat.say("slow: please check everything")
    model.wait_for_requests(1, timeout=20)
    started = time.monotonic()
    chat.api.call("process.cancel", instance_id=chat.instance_id)
    assert chat.api.wait_for(chat.instance_id, timeout=5)["status"] == "cancelled"
    assert time.monotonic() - started < 1.5  # well before the model answers
    chat.api.wait_until_idle()  # the turn has ended: the model answered, and the answer was dropped
    assert len(model.requests) == 1
    assert chat.texts() == []
    assert [m["author"] for m in chat.messages()] == ["customer"]


def test_a_boundary_timer_interrupts_the_dialog_and_drops_an_answer_still_being_written(chat, model):
    chat.deploy(fixture="chat_ai_timeout.bpmn")  # the assistant has a 2 s interrupting timer
    chat.say("hello")
    assert ai_answer_to("hello").fullmatch(chat.wait_for_texts(1)[0])
    model.slow_seconds = 4.0
    chat.say("slow: one more thing")
    model.wait_for_requests(2, timeout=20)
    status = chat.api.wait_for(chat.instance_id, timeout=20)
    assert status["status"] == "completed"
    assert chat.wait_for_texts(2)[1] == "We closed this chat; write again any time."
    chat.api.wait_until_idle()  # the slow answer has come back from the model, and was dropped
    assert len(chat.texts()) == 2
    assert conversations_on(chat.api, chat.channel["config_id"]) == []


def test_a_message_while_the_operator_task_is_open_is_only_stored(chat, model):
    chat.deploy()
    chat.say("I need a human")
    chat.wait_for_texts(1)
    chat.open_task()
    chat.say("hello? still there?")
    chat.api.wait_until_idle()
    assert len(model.requests) == 1
    assert [m["text"] for m in chat.messages()][-1] == "hello? still there?"


# -- the built-in ----------------------------------------------------------------------------------

def test_model_builtin_answers_from_the_knowledge_without_calling_the_endpoint(chat, model):
    chat.deploy(model="builtin")
    chat.say("How long does delivery take?")
    assert chat.wait_for_texts(1) == ["Delivery takes 3 to 5 working days within the EU."]
    chat.say("Can I speak to a real person?")
    assert chat.wait_for_texts(2)[1] == "I'll pass you to an operator."
    task = chat.open_task()
    assert task["variables"]["ai_outcome"] == "handoff"
    assert model.requests == []


def test_without_a_configured_model_the_builtin_answers(server, api, receiver):
    """The session's server has no BATON_AI_BASE_URL: the offline built-in is the default."""
    builtin = Chat(server, api, receiver)
    builtin.deploy()
    builtin.say("How do I reset my password?")
    [answer] = builtin.wait_for_texts(1)
    assert answer == "Use the Forgot password link on the login page; the reset email arrives within minutes."
    builtin.say("What is the meaning of life?")
    assert "operator" in builtin.wait_for_texts(2)[1]
    assert builtin.open_task()["variables"]["ai_outcome"] == "handoff"


# -- failures of the process ------------------------------------------------------------------------

def test_an_ai_step_without_a_conversation_fails_its_instance_clearly(ai_api):
    code = f"alone-{uuid.uuid4().hex[:8]}"
    ai_api.deploy(bpmn("ai_without_conversation.bpmn"), code=code)
    started = ai_api.call("process.start", definition_id=code)
    status = ai_api.wait_for(started["instance_id"])
    assert status["status"] == "failed"
    assert status["error"]["element_id"] == "assistant" and "no conversation" in status["error"]["message"]


def test_bad_ai_chat_properties_are_refused_at_deploy(ai_api):
    xml = (bpmn("chat_ai.bpmn").replace("__CHANNEL__", "1").replace("__MAX_TURNS__", "0")
           .replace("__MODEL__", '<camunda:property name="model" value="two words" />')
           .replace("refund, talk to sales", "refund,,sales")
           .replace("The customer is {{ external_username }}.", "{{ __import__('os') }}")
           .replace('<bpmn:serviceTask id="assistant" name="AI assistant">',
                    '<bpmn:serviceTask id="assistant" name="AI assistant"><bpmn:multiInstanceLoopCharacteristics>'
                    '<bpmn:loopCardinality>2</bpmn:loopCardinality></bpmn:multiInstanceLoopCharacteristics>'))
    response = ai_api.post({"jsonrpc": "2.0", "method": "definition.deploy", "params": {"bpmn": xml}, "id": 1})
    error = response.json()["error"]
    messages = [e["message"] for e in error["data"]["errors"] if e["element_id"] == "assistant"]
    assert error["code"] == -32602 and len(messages) == 5, error
    assert any("cannot loop" in m for m in messages)
    assert any("max_turns '0'" in m for m in messages) and any("model" in m for m in messages)
    assert any("handoff_keywords" in m for m in messages) and any("prompt" in m for m in messages)


def test_another_tenants_key_cannot_post_into_the_chat(chat, model, ai_server):
    chat.deploy()
    chat.say("hello")
    other = ai_server.create_tenant(f"other-{uuid.uuid4().hex[:8]}")
    response = post_message(ai_server, other, chat.channel["config_id"], chat_id=chat.chat_id, text="hijack")
    assert response.status_code == 403
    chat.wait_for_texts(1)
    assert all("hijack" not in m["text"] for m in chat.messages())
