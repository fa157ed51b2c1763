"""The cells of a DMN decision table translated at deploy into sandboxed Python expressions.

Input entries are FEEL unary tests, as modelers write them: ``-`` (anything), a value (``"gold"``,
``5``, ``true``, a variable), comparisons (``> 100``, ``<= limit``), intervals (``[1..5]``,
``]0..10[``, ``(1..5)``), lists of those (``"gold","silver"``) and ``not(...)`` of a list. They
become a Python test of the variable ``dmn_input``, the value of the column's input expression.
SpiffWorkflow's Python cells are read too: ``== 'x'``, ``in ['a', 'b']``, ``4 < ? < 6``, ``True``.
Input expressions and output entries are FEEL or JUEL expressions (``bpmn.expressions``) or Python.
"""
from __future__ import annotations

import re

from bpmn.dmn.hit_policies import INPUT
from bpmn.expressions.grammar import Parser
from bpmn.expressions.python import to_python, translate
from engine.sandbox import check_expression

_QUESTION = re.compile(r"""\?(?=(?:[^'"]|'[^']*'|"[^"]*")*$)""")  # a ? outside quotes (Spiff's cells)


def input_test(cell: str | None) -> tuple[str | None, str | None]:
    """(Python test of ``dmn_input`` or None for "anything", problem or None)."""
    text = (cell or "").strip()
    if text in ("", "-"):
        return None, None
    try:
        python = _unary_tests(text)
    except (ValueError, RecursionError) as exc:
        feel_problem = str(exc) if isinstance(exc, ValueError) else "the test is nested too deeply"
        python = _spiff_cell(text)
        if python is None:
            return None, f"the input entry '{text}' is neither a FEEL unary test ({feel_problem}) nor a Python test"
    problem = check_expression(python)
    return (None, f"the input entry '{text}' cannot run: {problem}") if problem else (python, None)


def expression(text: str | None, what: str) -> tuple[str | None, str | None]:
    """(Python, problem) for an input expression or output entry: FEEL (bare, as DMN cells are
    written, or ``=...``), JUEL ``${...}``, else SpiffWorkflow's Python."""
    source = (text or "").strip()
    if not source:
        return None, f"the {what} is empty"
    translation = translate(source if source.startswith(("=", "${", "#{")) else "=" + source)
    if translation.problem is None:
        return translation.python, None
    if translation.dialect == "FEEL" and not source.startswith("="):
        problem = check_expression(source)
        if problem is None:
            return source, None
        return None, (f"the {what} '{source}' is neither FEEL ({translation.problem}) nor Python ({problem})")
    return None, f"the {what} '{source}' cannot be translated from {translation.dialect}: {translation.problem}"


def _unary_tests(text: str) -> str:
    parser = Parser(text, "feel")
    if parser.token.is_word("not") and parser.tokens[1].is_op("("):
        parser.advance()
        parser.advance()
        tests = _positive_list(parser, closing=")")
        parser.expect_op(")", "to close not(")
        if parser.token.kind != "end":
            raise parser.unexpected()
        return f"(not {tests})"
    tests = _positive_list(parser, closing=None)
    if parser.token.kind != "end":
        raise parser.unexpected()
    return tests


def _positive_list(parser: Parser, closing: str | None) -> str:
    tests = [_positive(parser)]
    while parser.token.is_op(","):
        parser.advance()
        tests.append(_positive(parser))
    return tests[0] if len(tests) == 1 else "(" + " or ".join(tests) + ")"


def _positive(parser: Parser) -> str:
    token = parser.token
    if token.kind == "op" and token.text in ("<", "<=", ">", ">="):
        parser.advance()
        return f"({INPUT} {token.text} {to_python(parser.additive())})"
    if token.is_op("[", "(", "]"):
        return _interval(parser)
    value = to_python(parser.additive())
    return f"({INPUT} is None)" if value == "None" else f"({INPUT} == {value})"


def _interval(parser: Parser) -> str:
    opening = parser.advance().text
    parser.indexing = False
    low = to_python(parser.additive())
    parser.expect_op("..", "between the ends of an interval such as [1..5]")
    high = to_python(parser.additive())
    parser.indexing = True
    closing = parser.token
    if not closing.is_op("]", ")", "["):
        raise ValueError(f"the interval is not closed with ] ) or [ (position {closing.position + 1})")
    parser.advance()
    low_op = ">=" if opening == "[" else ">"
    high_op = "<=" if closing.text == "]" else "<"
    return f"({INPUT} {low_op} {low} and {INPUT} {high_op} {high})"


def _spiff_cell(text: str) -> str | None:
    """SpiffWorkflow's reading of a Python cell: ``?`` stands for the input; a cell that is a whole
    expression is compared for equality; one that needs a left side (``> 5``, ``in [...]``) gets it."""
    if _QUESTION.search(text):
        return _QUESTION.sub(INPUT, text)
    if check_expression(text) is None:
        return f"({INPUT} == ({text}))"
    if check_expression(f"{INPUT} {text}") is None:
        return f"({INPUT} {text})"
    return None
