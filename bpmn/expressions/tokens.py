"""The tokenizer of Camunda expressions: JUEL (Camunda 7, ``${...}``) and FEEL (Camunda 8, ``=...``).

One tokenizer serves both dialects and the DMN unary tests: numbers, strings (single or double
quotes, backslash escapes), names, and the operators of either language. What no dialect has (a
backtick, ``@``, ...) is refused here, naming the character and its position.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_SOURCE = 10_000  # characters of one expression: a condition, not a program

# Longest first, so that "<=" is not read as "<" "=" and ".." not as "." ".".
_OPERATORS = ("..", "==", "!=", "<=", ">=", "&&", "||", "<", ">", "=", "!", "(", ")", "[", "]",
              ".", ",", "+", "-", "*", "/", "%", "?", ":")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


@dataclass(frozen=True)
class Token:
    kind: str        # "number", "string", "name", "op" or "end"
    text: str        # as written
    value: Any       # the number, the unescaped string, or the text
    position: int    # 0-based offset in the expression

    def is_op(self, *texts: str) -> bool:
        return self.kind == "op" and self.text in texts

    def is_word(self, *words: str) -> bool:
        return self.kind == "name" and self.text in words


def tokenize(source: str, offset: int = 0) -> list[Token]:
    """The tokens of ``source``, ending with an ``end`` token; ValueError names what cannot be read.

    Positions count from the start of the text as written (``offset``: what precedes ``source``)."""
    if len(source) > MAX_SOURCE:
        raise ValueError(f"the expression is longer than {MAX_SOURCE:,} characters")
    tokens: list[Token] = []
    at = 0
    while at < len(source):
        char = source[at]
        if char.isspace():
            at += 1
            continue
        if char in "'\"":
            value, end = _string(source, at, offset)
            tokens.append(Token("string", source[at:end], value, at + offset))
            at = end
            continue
        number = _NUMBER.match(source, at)  # "1..5" stops before "..": the fraction needs a digit
        if number:
            text = number.group()
            value = float(text) if any(c in text for c in ".eE") else int(text)
            tokens.append(Token("number", text, value, at + offset))
            at = number.end()
            continue
        name = _NAME.match(source, at)
        if name:
            tokens.append(Token("name", name.group(), name.group(), at + offset))
            at = name.end()
            continue
        operator = next((op for op in _OPERATORS if source.startswith(op, at)), None)
        if operator is None:
            raise ValueError(f"the character {char!r} at position {at + offset + 1} is not part of the language")
        tokens.append(Token("op", operator, operator, at + offset))
        at += len(operator)
    tokens.append(Token("end", "", None, len(source) + offset))
    return tokens


def _string(source: str, start: int, offset: int) -> tuple[str, int]:
    quote, out, at = source[start], [], start + 1
    while at < len(source):
        char = source[at]
        if char == quote:
            return "".join(out), at + 1
        if char == "\\":
            escape = source[at + 1:at + 2]
            if escape in _ESCAPES:
                out.append(_ESCAPES[escape])
                at += 2
                continue
            if escape == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", source[at + 2:at + 6]):
                out.append(chr(int(source[at + 2:at + 6], 16)))
                at += 6
                continue
            raise ValueError(f"the escape '\\{escape}' at position {at + offset + 1} is not known")
        out.append(char)
        at += 1
    raise ValueError(f"the text starting at position {start + offset + 1} has no closing quote")
