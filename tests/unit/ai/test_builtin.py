"""The built-in provider: retrieval over the step's knowledge, greetings and handoffs."""
from __future__ import annotations

import time

import pytest

from ai import AiRequest, Reply, Turn
from ai.builtin import (NO_ANSWER_REASON, NO_ANSWER_TEXT, PERSON_REASON, PERSON_TEXT, BuiltinProvider,
                        _stem, build_index, split_passages)

SHOP = """\
# Opening hours

We are open Monday to Friday, 9:00 to 18:00. On Saturdays we open at 10:00.

Q: How much does shipping cost?
A: Shipping costs 5 EUR and is free above 50 EUR.
Q: Can I return an item?
A: Yes, within 30 days,
as long as it is unused.

Q: Do you deliver abroad?
A: We deliver to Germany and Austria only.

Gift cards can be bought in every shop and online. They are valid for three years.
"""

NO_ANSWER = Reply(NO_ANSWER_TEXT, handoff=True, reason=NO_ANSWER_REASON)
PERSON = Reply(PERSON_TEXT, handoff=True, reason=PERSON_REASON)


@pytest.fixture
def builtin():
    return BuiltinProvider()


def ask(*turns: tuple[str, str] | str, knowledge: str = SHOP) -> AiRequest:
    """A request; a bare string is a customer message."""
    history = tuple(Turn("user", t) if isinstance(t, str) else Turn(*t) for t in turns)
    return AiRequest(system_prompt="", knowledge=knowledge, history=history)


# --- answers from the knowledge -----------------------------------------------------------------

def test_a_faq_question_is_answered_with_the_answer_part_only(builtin):
    assert builtin.answer(ask("How much is shipping?")) == Reply("Shipping costs 5 EUR and is free above 50 EUR.")


def test_a_faq_answer_over_several_lines_is_returned_whole(builtin):
    assert builtin.answer(ask("Can I return an item I bought?")).text == "Yes, within 30 days,\nas long as it is unused."


def test_a_plain_paragraph_answers_and_its_heading_helps_matching(builtin):
    assert builtin.answer(ask("What are your opening hours?")).text.startswith("We are open Monday to Friday")
    assert builtin.answer(ask("Where can I buy gift cards?")).text.startswith("Gift cards can be bought")


def test_a_heading_is_matched_but_never_returned():
    assert [answer for answer, _ in split_passages(SHOP)][0].startswith("We are open")
    assert all(not answer.startswith("#") for answer, _ in split_passages(SHOP))


def test_a_long_paragraph_answers_with_the_sentences_that_match(builtin):
    filler = " ".join(f"Sentence {i} talks about our history and values." for i in range(30))
    knowledge = f"{filler} Parking is free behind the building. {filler}"

    reply = builtin.answer(ask("Is parking free?", knowledge=knowledge))

    assert "Parking is free behind the building." in reply.text
    assert len(reply.text) < 600 < len(knowledge)


def test_a_question_about_a_known_subject_passes_the_threshold_and_an_unknown_one_does_not(builtin):
    assert builtin.answer(ask("Do you deliver to Austria?")) == Reply("We deliver to Germany and Austria only.")
    assert builtin.answer(ask("Do you deliver to Canada?")) == NO_ANSWER      # only "deliver" is known


def test_an_unrelated_question_hands_off_with_the_no_answer_text(builtin):
    assert builtin.answer(ask("What is the meaning of life?")) == NO_ANSWER
    assert builtin.answer(ask("Do you sell bicycles online?")) == NO_ANSWER     # shares only "online"


def test_empty_knowledge_hands_off(builtin):
    assert builtin.answer(ask("How much is shipping?", knowledge="")) == NO_ANSWER
    assert builtin.answer(ask("How much is shipping?", knowledge="\n \n")) == NO_ANSWER


def test_only_the_unanswered_messages_are_the_query(builtin):
    reply = builtin.answer(ask("How much does shipping cost?",
                               ("assistant", "Shipping costs 5 EUR and is free above 50 EUR."),
                               "OK. And when are you open?"))

    assert reply.text.startswith("We are open Monday to Friday")


def test_several_unanswered_messages_are_read_together(builtin):
    reply = builtin.answer(ask(("assistant", "Welcome!"), "hi", "what about gift cards"))

    assert reply.text.startswith("Gift cards can be bought")


def test_non_english_and_unicode_text_is_matched_by_its_words(builtin):
    knowledge = ("F: egal\n\nQ: Wie lange dauert der Versand?\nA: Der Versand dauert 2–3 Werktage. 📦\n\n"
                 "営業時間は9時から18時までです。")

    assert builtin.answer(ask("Wie lange dauert der Versand?", knowledge=knowledge)).text \
        == "Der Versand dauert 2–3 Werktage. 📦"
    assert builtin.answer(ask("営業時間は?", knowledge=knowledge)).handoff is True
    assert builtin.answer(ask("🙂🙂", knowledge=knowledge)) == NO_ANSWER


def test_the_same_question_gets_the_same_answer(builtin):
    answers = {builtin.answer(ask("shipping")).text for _ in range(3)}
    build_index.cache_clear()
    answers.add(builtin.answer(ask("shipping")).text)

    assert answers == {"Shipping costs 5 EUR and is free above 50 EUR."}


# --- greetings and handoffs ---------------------------------------------------------------------

@pytest.mark.parametrize("text", ["hi", "Hello!", "good morning", "Hey there"])
def test_a_greeting_gets_a_greeting(builtin, text):
    assert builtin.answer(ask(text)) == Reply("Hello! How can I help you?")


@pytest.mark.parametrize("text", ["thanks", "Thank you so much!", "ok thanks"])
def test_thanks_get_you_are_welcome(builtin, text):
    assert builtin.answer(ask(text)) == Reply("You're welcome!")


def test_a_greeting_with_a_question_answers_the_question(builtin):
    assert builtin.answer(ask("Hello, how much is shipping?")).text.startswith("Shipping costs")


@pytest.mark.parametrize("text", ["Can I talk to a real person?", "operator", "I want to speak to a human",
                                  "Please connect me with an agent about my shipping"])
def test_asking_for_a_person_hands_off(builtin, text):
    assert builtin.answer(ask(text)) == PERSON


def test_a_person_mentioned_in_a_question_is_not_a_request_for_one(builtin):
    knowledge = "Q: What does an extra person cost?\nA: Each extra person pays 20 EUR per night."

    reply = builtin.answer(ask("What does an additional person cost per night?", knowledge=knowledge))

    assert reply == Reply("Each extra person pays 20 EUR per night.")


# --- speed --------------------------------------------------------------------------------------

def large_knowledge(size: int) -> str:
    paragraphs, n = [], 0
    while sum(len(p) + 2 for p in paragraphs) < size:
        paragraphs.append(f"Q: What is the policy for product line {n} number {n * 7}?\n"
                          f"A: Product line {n} has warranty code W{n} and ships from depot D{n % 13}.")
        n += 1
    return "\n\n".join(paragraphs)


def first_answer_s(builtin: BuiltinProvider, size: int) -> float:
    """Seconds of the first answer from a fresh ``size``-character knowledge (no index, no stems cached)."""
    build_index.cache_clear()
    _stem.cache_clear()
    request = ask("What is the policy for product line 421?", knowledge=large_knowledge(size))
    started = time.perf_counter()
    builtin.answer(request)
    return time.perf_counter() - started


def test_a_first_answer_costs_in_proportion_to_the_knowledge(builtin):
    # The baseline is the same answer from a quarter of the text, measured in the same run: linear
    # work is 4x it, work that compares passages with each other would be 16x.
    quarter = min(first_answer_s(builtin, 25_000) for _ in range(3))
    whole = min(first_answer_s(builtin, 100_000) for _ in range(3))

    assert whole < quarter * 8, (whole, quarter)


def test_a_100_kb_knowledge_answers_and_repeats_faster_from_the_cache(builtin):
    knowledge = large_knowledge(100_000)
    request = ask("What is the policy for product line 421?", knowledge=knowledge)

    build_index.cache_clear()
    started = time.perf_counter()
    first = builtin.answer(request)
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(10):
        again = builtin.answer(request)
    repeat_s = (time.perf_counter() - started) / 10

    assert len(knowledge) >= 100_000
    assert first.text == "Product line 421 has warranty code W421 and ships from depot D5." == again.text
    assert repeat_s * 5 < first_s            # the passages are indexed once per knowledge text
