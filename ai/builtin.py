"""The built-in provider: retrieval over the step's knowledge text. It is not a language model.

It never composes an answer: it returns a passage of the step's ``knowledge`` as written, a fixed
greeting, or a handoff to an operator. Offline, deterministic, standard library only.

* **Passages** are blank-line separated paragraphs. A paragraph in FAQ form (lines starting with
  "Q:" and "A:") gives one passage per question: matched on question and answer, answered with the
  answer part. Markdown heading lines ("# Delivery") at the top of a paragraph, or alone in one,
  count for matching the text under them but are never returned. Paragraphs longer than
  ~600 characters are cut into runs of whole sentences.
* **Words** are lower-case ``\\w+`` minus a small English stopword list, lightly stemmed
  (plural -s/-es/-ies, -ing, -ed, a final -e, -y or -i), so "shipping", "ships" and "shipped"
  all become "ship", and "reply", "replies" and "replied" all become "repl".
* **Scoring** is BM25 (k1 = 1.2, b = 0.75) against the query: the customer's unanswered messages
  (the trailing "user" turns), so an earlier, answered question does not steer the answer.
* **Threshold**: the best passage is returned only when the query words it contains carry MORE
  than half of the query's weight, and are at least a third of its distinct content words.
  A word's weight is its IDF; a word the knowledge never uses weighs as much as the knowledge's
  rarest words. So "Do you deliver to Canada?" is not answered from "We deliver to Germany and
  Austria only." (half the weight), nor is a question answered from a passage that merely shares
  its common words. Otherwise the customer goes to an operator.

Before retrieval, a message that asks for a person hands off, and one that is only a greeting or
thanks gets a short polite answer.
"""
from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass

from ai.types import BUILTIN, AiRequest, Reply, Turn, clip_reply

K1 = 1.2
B = 0.75
MIN_WEIGHT_SHARE = 0.5     # the passage must hold MORE than this share of the query's weight
MIN_WORD_SHARE = 1 / 3     # and at least this share of the query's distinct content words

GREETING_TEXT = "Hello! How can I help you?"
THANKS_TEXT = "You're welcome!"
PERSON_TEXT = "I'll pass you to an operator."
PERSON_REASON = "The customer asked for a person."
NO_ANSWER_TEXT = "I don't have an answer to that. I'll pass you to an operator who can help."
NO_ANSWER_REASON = "No answer in the knowledge."

_WORD = re.compile(r"\w+")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")
_QUESTION = re.compile(r"^(?:q|question)\s*:\s*", re.IGNORECASE)
_ANSWER = re.compile(r"^(?:a|answer)\s*:\s*", re.IGNORECASE)
_LONG_PARAGRAPH = 600
_CHUNK = 500

_STOPWORDS = frozenset("""
    a an the and or but if then so to of in on at by for from with about as into over up out
    is are was were be been being am do does did doing have has had having
    i me my mine we us our you your yours he him his she her it its they them their
    this that these those there here what which who whom whose when where why how
    can could will would shall should may might must please any some all just also too very
    much many more most not no yes than only own same ok okay hi hello hey thanks thank
    want know tell need let something anything thing things
""".split())

_GREETINGS = frozenset("hi hello hey hallo hiya howdy greetings morning afternoon evening day".split())
_THANKS = frozenset("thanks thank thx ty cheers appreciated".split())
_POLITE_FILLER = frozenset("good you so very much a lot many there all again ok okay and great the team".split())

_PERSON = frozenset("human person operator agent representative someone somebody".split())
_CONTACT = frozenset("talk speak chat connect transfer contact call reach want need get give put "
                     "pass see real live help".split())
_SHORT_MESSAGE = 6   # words: "a human please", "is there a real person?"


class BuiltinProvider:
    """Answers from the step's knowledge text; see the module docstring."""

    name = BUILTIN
    max_seconds = 5.0

    def answer(self, request: AiRequest) -> Reply:
        query = _unanswered_text(request.history)
        words = _WORD.findall(query.casefold())
        if _asks_for_person(words):
            return Reply(PERSON_TEXT, handoff=True, reason=PERSON_REASON)
        if polite := _polite_reply(words):
            return Reply(polite)
        found = best_answer(request.knowledge, query)
        if found is None:
            return Reply(NO_ANSWER_TEXT, handoff=True, reason=NO_ANSWER_REASON)
        return Reply(clip_reply(found))


def _unanswered_text(history: tuple[Turn, ...]) -> str:
    trailing: list[str] = []
    for turn in reversed(history):
        if turn.role != "user":
            break
        trailing.append(turn.text)
    return "\n".join(reversed(trailing))


def _asks_for_person(words: list[str]) -> bool:
    if not _PERSON.intersection(words):
        return False
    return len(words) <= _SHORT_MESSAGE or bool(_CONTACT.intersection(words))


def _polite_reply(words: list[str]) -> str | None:
    if not words or not all(w in _GREETINGS or w in _THANKS or w in _POLITE_FILLER for w in words):
        return None
    if _THANKS.intersection(words):
        return THANKS_TEXT
    return GREETING_TEXT if _GREETINGS.intersection(words) else None


# --- words ----------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ing") and len(word) > 5:
        word = _undouble(word[:-3])
    elif word.endswith("ed") and len(word) > 4:
        word = _undouble(word[:-2])
    if word.endswith(("e", "y", "i")) and len(word) > 3:   # make/making, reply/replied/replies
        word = word[:-1]
    return word


def _undouble(word: str) -> str:
    """ "shipp" (from "shipping") -> "ship"; "fill", "pass" and "buzz" stay."""
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "aeioulsz":
        return word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The content words of ``text``, stemmed, in order."""
    return [_stem(w) for w in _WORD.findall(text.casefold())
            if w not in _STOPWORDS and (len(w) > 1 or w.isdigit())]


# --- passages and their index ---------------------------------------------------------------------

@dataclass(frozen=True)
class Passage:
    answer: str                 # what the customer gets
    terms: Counter[str]         # what it is matched on (heading, question and answer)
    length: int


@dataclass(frozen=True)
class Index:
    passages: tuple[Passage, ...]
    postings: dict[str, tuple[tuple[int, int], ...]]   # term -> ((passage number, count), ...)
    average_length: float

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1 + (len(self.passages) - df + 0.5) / (df + 0.5))

    def weight(self, term: str) -> float:
        """How much ``term`` counts in the threshold: its IDF, a word the knowledge never uses
        counting as its rarest word (else with a short text one unknown word outweighs all)."""
        df = max(1, len(self.postings.get(term, ())))
        return math.log(1 + (len(self.passages) - df + 0.5) / (df + 0.5))


def split_passages(knowledge: str) -> list[tuple[str, str]]:
    """(answer, text to match) for each passage of ``knowledge``, in order."""
    found: list[tuple[str, str]] = []
    heading = ""
    for block in _BLANK_LINE.split(knowledge.replace("\r\n", "\n").replace("\r", "\n")):
        lines = [line.strip() for line in block.split("\n") if line.strip()]
        top = 0
        while top < len(lines) and lines[top].startswith("#"):
            top += 1
        heading = " ".join([heading, *(line.lstrip("#") for line in lines[:top])]).strip()
        body = lines[top:]
        if not body:
            continue             # a heading alone: it belongs to the next paragraph
        pairs = _faq_pairs(body) or [(chunk, "") for chunk in _chunks("\n".join(body))]
        found += [(answer, f"{heading}\n{question}\n{answer}") for answer, question in pairs]
        heading = ""
    return found


def _faq_pairs(lines: list[str]) -> list[tuple[str, str]]:
    """(answer, question) pairs of a paragraph in FAQ form; [] when it is not one."""
    if not any(_QUESTION.match(line) for line in lines):
        return []
    pairs: list[tuple[str, str]] = []
    preface: list[str] = []
    question: list[str] | None = None
    answer: list[str] = []
    for line in lines:
        if match := _QUESTION.match(line):
            if question is not None and answer:
                pairs.append(("\n".join(answer), " ".join(preface + question)))
            question, answer = [line[match.end():]], []
        elif match := _ANSWER.match(line):
            answer.append(line[match.end():])
        elif question is None:
            preface.append(line)         # text above the first question: context for matching
        elif answer:
            answer.append(line)
        else:
            question.append(line)
    if question is not None and answer:
        pairs.append(("\n".join(answer), " ".join(preface + question)))
    return [(a.strip(), q) for a, q in pairs if a.strip()]


def _chunks(paragraph: str) -> list[str]:
    if len(paragraph) <= _LONG_PARAGRAPH:
        return [paragraph]
    chunks: list[str] = []
    for sentence in _SENTENCE_END.split(paragraph):
        if chunks and len(chunks[-1]) + len(sentence) < _CHUNK:
            chunks[-1] += " " + sentence
        else:
            chunks.append(sentence)
    return chunks


@functools.lru_cache(maxsize=8)
def build_index(knowledge: str) -> Index:
    """The passages of ``knowledge`` and their inverted index (cached: a step sends the same text
    on every message)."""
    passages = []
    postings: dict[str, list[tuple[int, int]]] = {}
    for number, (answer, match_text) in enumerate(split_passages(knowledge)):
        counts = Counter(terms(match_text))
        passages.append(Passage(answer, counts, sum(counts.values())))
        for term, count in counts.items():
            postings.setdefault(term, []).append((number, count))
    average = sum(p.length for p in passages) / len(passages) if passages else 0.0
    return Index(tuple(passages), {t: tuple(p) for t, p in postings.items()}, average or 1.0)


def best_answer(knowledge: str, query: str) -> str | None:
    """The answer part of the passage that best matches ``query``, or None when none is good enough."""
    index = build_index(knowledge)
    wanted = sorted(set(terms(query)))       # sorted: float sums in a fixed order, ties alike
    if not wanted or not index.passages:
        return None
    scores: dict[int, float] = {}
    for term in wanted:
        idf = index.idf(term)
        for number, count in index.postings.get(term, ()):
            norm = 1 - B + B * index.passages[number].length / index.average_length
            scores[number] = scores.get(number, 0.0) + idf * count * (K1 + 1) / (count + K1 * norm)
    if not scores:
        return None
    best = min(scores, key=lambda number: (-scores[number], number))
    passage = index.passages[best]
    shared = [term for term in wanted if term in passage.terms]
    weight_share = sum(index.weight(t) for t in shared) / sum(index.weight(t) for t in wanted)
    if weight_share <= MIN_WEIGHT_SHARE or len(shared) < MIN_WORD_SHARE * len(wanted):
        return None
    return passage.answer
