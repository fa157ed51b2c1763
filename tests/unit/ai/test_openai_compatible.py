"""The OpenAI-compatible provider and build_provider's routing, against a real local fake server
(tests/fake_openai.py) through the real openai client."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ai import BUILTIN, AiRequest, ProviderError, Reply, Turn, build_provider
from ai.openai_compatible import BACKOFF_CAP_S, HANDOFF_SENTENCE, HANDOFF_TOOL, NO_MODEL
from tests.fake_openai import FakeOpenAI


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def connect(fake):
    """build_provider against the fake (no retries, 1 s timeout unless told); closed afterwards."""
    made = []

    def make(**options):
        settings = {"base_url": fake.base_url, "model": "fake-model", "api_key": None,
                    "timeout_s": 1.0, "retries": 0, **options}
        made.append(build_provider(**settings))
        return made[-1]

    yield make
    for provider in made:
        provider.close()


def ask(*texts: str, prompt: str = "", knowledge: str = "", model: str | None = None) -> AiRequest:
    """A request whose history alternates customer and assistant, starting with the customer."""
    turns = tuple(Turn("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(texts))
    return AiRequest(system_prompt=prompt, knowledge=knowledge, history=turns, model=model)


def scripted(content, handoff=False, reason=None, **extra):
    return lambda body: {"content": content, "handoff": handoff, "reason": reason, **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the request --------------------------------------------------------------------------------

def test_history_is_sent_in_order_after_one_system_message_with_prompt_knowledge_and_handoff(connect, fake):
    connect().answer(ask("Hi", "Hello! How can I help?", "Where is my parcel?",
                         prompt="You are Baton's shop assistant.", knowledge="Parcels take 2 days."))

    body = fake.requests[0]
    system, *history = body["messages"]
    assert system["role"] == "system"
    assert system["content"] == ("You are Baton's shop assistant.\n\n"
                                 "Use this knowledge to answer:\nParcels take 2 days.\n\n" + HANDOFF_SENTENCE)
    assert history == [{"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": "Hello! How can I help?"},
                       {"role": "user", "content": "Where is my parcel?"}]
    assert [t["function"]["name"] for t in body["tools"]] == [HANDOFF_TOOL]
    assert body["tool_choice"] == "auto"


def test_no_knowledge_means_no_knowledge_section(connect, fake):
    connect().answer(ask("Hi", prompt="Be brief."))

    assert fake.requests[0]["messages"][0]["content"] == "Be brief.\n\n" + HANDOFF_SENTENCE


def test_the_steps_model_overrides_the_configured_default(connect, fake):
    provider = connect(model="default-model")

    provider.answer(ask("one", model="step-model"))
    provider.answer(ask("two"))

    assert [body["model"] for body in fake.requests] == ["step-model", "default-model"]


# --- the answer ---------------------------------------------------------------------------------

def test_a_plain_answer_is_the_models_text(connect):
    reply = connect().answer(ask("Where is my parcel?"))

    assert reply == Reply("AI #1: Where is my parcel?")


def test_a_handoff_tool_call_hands_off_with_its_reason(connect):
    reply = connect().answer(ask("Can I talk to a person?"))

    assert reply == Reply("Let me find a colleague for you.", handoff=True, reason="customer asked for a person")


def test_a_handoff_without_text_or_with_arguments_that_are_not_json_still_hands_off(connect, fake):
    provider = connect()
    fake.brain = scripted(None, handoff=True, arguments="{not json")

    reply = provider.answer(ask("help"))

    assert reply == Reply("", handoff=True, reason=None)


def test_a_call_of_another_tool_is_ignored(connect, fake):
    fake.brain = scripted("Here is the weather.", handoff=True, tool_name="get_weather")

    reply = connect().answer(ask("weather?"))

    assert reply == Reply("Here is the weather.")


def test_empty_content_without_a_handoff_is_an_error(connect, fake):
    fake.brain = scripted("  ")

    with pytest.raises(ProviderError) as caught:
        connect().answer(ask("hello"))
    assert caught.value.message == "The model answered with no text."


def test_content_longer_than_10000_characters_is_cut_with_an_ellipsis(connect, fake):
    fake.brain = scripted("x" * 12_000)

    reply = connect().answer(ask("tell me everything"))

    assert len(reply.text) == 10_000
    assert reply.text.endswith("x…")


def test_a_lone_surrogate_in_the_answer_becomes_a_replacement_character(connect, fake):
    fake.brain = scripted("broken \ud800 text")  # JSON can carry it (as \\ud800); no UTF-8 body can

    reply = connect().answer(ask("hello"))

    assert reply.text == "broken \ufffd text"
    reply.text.encode("utf-8")


# --- servers without tools ----------------------------------------------------------------------

def test_a_server_that_refuses_tools_is_answered_without_them_and_remembered(connect, fake):
    fake.refuse_tools = True
    provider = connect()

    first = provider.answer(ask("one", prompt="Be brief."))
    second = provider.answer(ask("two", prompt="Be brief."))

    assert (first.text, second.text) == ("AI #1: one", "AI #2: two")
    assert ["tools" in body for body in fake.requests] == [True, False, False]
    assert [body["messages"][0]["content"] for body in fake.requests[1:]] == ["Be brief.", "Be brief."]


def test_a_400_also_without_tools_is_an_error_and_tools_are_offered_again(connect, fake):
    provider = connect()
    fake.fail_next(400, times=2)

    with pytest.raises(ProviderError) as caught:
        provider.answer(ask("one"))
    provider.answer(ask("two"))

    assert caught.value.message == f"The model at {fake.base_url.removesuffix('/v1')} answered HTTP 400."
    assert caught.value.retryable is False
    assert ["tools" in body for body in fake.requests] == [True, False, True]


# --- retries and errors -------------------------------------------------------------------------

def test_two_server_errors_then_an_answer_succeeds_with_two_retries(connect, fake):
    fake.fail_next(500, times=2)

    reply = connect(retries=2).answer(ask("hello"))

    assert reply.text == "AI #1: hello"
    assert len(fake.requests) == 3


def test_exhausted_retries_raise_a_retryable_error_with_the_status(connect, fake):
    fake.fail_next(503, times=2)

    with pytest.raises(ProviderError) as caught:
        connect(retries=1).answer(ask("hello"))
    assert "answered HTTP 503" in caught.value.message
    assert caught.value.retryable is True
    assert len(fake.requests) == 2


def test_a_client_error_is_neither_retried_nor_retryable(connect, fake):
    fake.fail_next(422)

    with pytest.raises(ProviderError) as caught:
        connect(retries=2).answer(ask("hello"))
    assert "answered HTTP 422" in caught.value.message
    assert caught.value.retryable is False
    assert len(fake.requests) == 1


def test_a_retry_after_longer_than_the_backoff_cap_is_not_waited_for(connect, fake):
    fake.fail_next(503, retry_after=60)
    started = time.monotonic()

    reply = connect(retries=1).answer(ask("hello"))

    assert reply.text == "AI #1: hello"
    assert time.monotonic() - started < BACKOFF_CAP_S + 1


def test_an_answer_slower_than_the_timeout_is_a_retryable_timeout(connect, fake):
    fake.hang_next(2.0)

    with pytest.raises(ProviderError) as caught:
        connect(timeout_s=0.3).answer(ask("hello"))
    assert caught.value.message == f"The model at {fake.base_url.removesuffix('/v1')} did not answer within 0.3 s."
    assert caught.value.retryable is True


def test_a_wrong_api_key_is_refused_and_the_message_does_not_repeat_it():
    with FakeOpenAI(api_key="sk-right-key") as fake:
        wrong = build_provider(base_url=fake.base_url, model="m", api_key="sk-wrong-secret-123", retries=2)
        right = build_provider(base_url=fake.base_url, model="m", api_key="sk-right-key")
        try:
            with pytest.raises(ProviderError) as caught:
                wrong.answer(ask("hello"))
            answered = right.answer(ask("hello"))
        finally:
            wrong.close()
            right.close()
    error = caught.value
    assert "refused the API key (HTTP 401)" in error.message
    assert "sk-wrong-secret-123" not in str(error) and "sk-wrong-secret-123" not in repr(error)
    assert error.__cause__ is None and error.__suppress_context__      # the openai error quotes the key
    assert error.retryable is False
    assert len(fake.requests) == 2          # a 401 is not retried
    assert answered.text == "AI #1: hello"


def test_an_unknown_model_error_names_the_model(connect, fake):
    fake.fail_next(404)

    with pytest.raises(ProviderError) as caught:
        connect().answer(ask("hello", model="gpt-unknown"))
    assert "'gpt-unknown'" in caught.value.message and "HTTP 404" in caught.value.message


def test_an_unreachable_server_is_retryable_and_named_by_its_origin_only():
    port = free_port()
    provider = build_provider(base_url=f"http://user:pa55@127.0.0.1:{port}/v1/secret-path?token=t0ken",
                              model="m", api_key=None, timeout_s=1.0, retries=0)
    try:
        with pytest.raises(ProviderError) as caught:
            provider.answer(ask("hello"))
    finally:
        provider.close()
    assert caught.value.message == f"The model at http://127.0.0.1:{port} could not be reached."
    assert caught.value.retryable is True


def test_one_provider_answers_calls_from_several_threads(connect, fake):
    provider = connect()
    fake.delay = 0.05
    replies: list[Reply] = []

    def call(i):
        replies.append(provider.answer(ask(f"message {i}")))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(r.text.split(": ")[1] for r in replies) == [f"message {i}" for i in range(8)]
    assert len({r.text.split(":")[0] for r in replies}) == 8      # eight distinct answers


def test_max_seconds_covers_every_attempt_and_every_backoff():
    provider = build_provider(base_url="http://127.0.0.1:9/v1", model="m", api_key=None,
                              timeout_s=10.0, retries=2)
    try:
        assert provider.max_seconds >= 3 * 10.0 + 2 * BACKOFF_CAP_S
    finally:
        provider.close()


# --- routing ------------------------------------------------------------------------------------

KNOWLEDGE = "Q: When are you open?\nA: Monday to Friday, 9:00 to 18:00."


def test_without_a_base_url_the_builtin_answers():
    provider = build_provider(base_url=None, model="gpt-4o", api_key="k")

    reply = provider.answer(ask("When are you open?", knowledge=KNOWLEDGE, model="gpt-4o"))

    assert provider.name == BUILTIN
    assert reply == Reply("Monday to Friday, 9:00 to 18:00.")


def test_the_builtin_model_is_answered_offline_even_with_an_endpoint(connect, fake):
    provider = connect()

    reply = provider.answer(ask("When are you open?", knowledge=KNOWLEDGE, model=BUILTIN))

    assert provider.name == "openai-compatible"
    assert reply.text == "Monday to Friday, 9:00 to 18:00."
    assert fake.requests == []


def test_a_builtin_default_model_names_the_provider_builtin_but_steps_may_use_the_endpoint(connect, fake):
    provider = connect(model=BUILTIN, timeout_s=10.0)

    offline = provider.answer(ask("When are you open?", knowledge=KNOWLEDGE))
    online = provider.answer(ask("When are you open?", knowledge=KNOWLEDGE, model="fake-model"))

    assert provider.name == BUILTIN
    assert offline.text == "Monday to Friday, 9:00 to 18:00."
    assert online.text == "AI #1: When are you open?"
    assert provider.max_seconds == connect(timeout_s=10.0).max_seconds > 20    # the endpoint's


def test_no_model_configured_or_named_is_an_error_before_any_request(connect, fake):
    with pytest.raises(ProviderError) as caught:
        connect(model=None).answer(ask("hello"))
    assert caught.value.message == NO_MODEL
    assert fake.requests == []


def test_the_request_body_is_the_one_chat_completions_create_sends(fake, connect):
    """The provider posts its body with the client's generic POST (create's parameter transform
    cost ~40 % of the client's CPU per turn): the body must be the very one create sends, with
    the tools offered and, once a server refused them, without."""
    import openai

    from ai.openai_compatible import TOOLS, build_messages

    request = ask("Hi there", "Hello! How can I help?", "Where is my order 42?",
                  prompt="You are Baton's helper.", knowledge="Orders ship in 2 days.")
    client = openai.OpenAI(base_url=fake.base_url, api_key="not-needed", max_retries=0)
    try:
        for tools in (TOOLS, ()):
            if not tools:
                fake.refuse_tools = True
            extra = {"tools": list(tools), "tool_choice": "auto"} if tools else {}
            before = len(fake.requests)
            client.chat.completions.create(model="fake-model", messages=build_messages(request, tools), **extra)
            general = fake.requests[before]
            assert connect().answer(request).text
            ours = fake.requests[-1]  # the last one: without tools, after the 400 to the first
            assert ours == general
            assert ("tools" in ours) == bool(tools)
    finally:
        client.close()
