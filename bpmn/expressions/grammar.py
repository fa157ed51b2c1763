"""The subset of JUEL and FEEL that real models use, parsed into a small tree (recursive descent).

Nodes are tuples: ``("lit", value)``, ``("name", id)``, ``("get", node, key_node)`` (property
access and indexing), ``("not", node)``, ``("neg", node)``, ``("empty", node)``,
``("bool", "and"|"or", a, b)``, ``("cmp", op, a, b)``, ``("arith", op, a, b)``,
``("cond", test, then, else)``, ``("between", x, low, high)``, ``("has", node, key_node)``.

Precedence, lowest first: conditional (JUEL ``a ? b : c``, FEEL ``if a then b else c``), ``or``,
``and``, equality, relational (FEEL also ``between``), ``+ -``, ``* / %``, unary (``- ! not
empty``), then ``.name`` and ``[index]``, and the read methods of Camunda Spin's JSON values that
a process variable holding JSON answers in Baton (it is a map or a list already): ``x.prop("a")``
is ``x["a"]``, ``x.hasProp("a")`` is ``"a" in x``, and ``numberValue() stringValue() boolValue()
value() elements()`` give the value itself. Everything else (other method calls, function calls,
lambdas, assignments, FEEL's date and list functions ...) is refused with a ValueError that names it.
"""
from __future__ import annotations

from bpmn.expressions.tokens import Token, tokenize

MAX_DEPTH = 60  # nesting of parentheses and operators; deeper is not a condition anyone writes

_EQUALITY = {"juel": {"==": "==", "!=": "!=", "eq": "==", "ne": "!="}, "feel": {"=": "==", "!=": "!="}}
_RELATIONAL = {"<": "<", ">": ">", "<=": "<=", ">=": ">="}
_JUEL_RELATIONAL_WORDS = {"lt": "<", "gt": ">", "le": "<=", "ge": ">="}
_MULTIPLICATIVE = {"*": "*", "/": "/", "%": "%"}
_JUEL_MULTIPLICATIVE_WORDS = {"div": "/", "mod": "%"}
_LITERAL_WORDS = {"true": True, "false": False, "null": None}
# Camunda Spin's JSON reading methods (JUEL): a process variable holding JSON is a map or a list here.
SPIN_VALUE_METHODS = frozenset({"numberValue", "stringValue", "boolValue", "value", "elements"})
SPIN_KEY_METHODS = {"prop": "get", "hasProp": "has"}
_RESERVED = {"juel": {"and", "or", "not", "eq", "ne", "lt", "gt", "le", "ge", "div", "mod", "empty",
                      "instanceof", "true", "false", "null"},
             "feel": {"and", "or", "not", "if", "then", "else", "between", "in", "true", "false", "null",
                      "some", "every", "satisfies", "for", "return", "instance", "of", "function"}}


class Parser:
    """Parses one expression of ``dialect`` ("juel" or "feel")."""

    def __init__(self, source: str, dialect: str, offset: int = 0):
        self.tokens: list[Token] = tokenize(source, offset)
        self.at = 0
        self.depth = 0
        self.dialect = dialect
        self.indexing = True  # off inside a DMN interval, where "[" closes "]0..10["

    # -- helpers -------------------------------------------------------------------------------

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def advance(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expect_op(self, text: str, why: str) -> None:
        if not self.token.is_op(text):
            raise ValueError(f"'{text}' is missing {why} (position {self.token.position + 1})")
        self.advance()

    def unexpected(self) -> ValueError:
        token = self.token
        if token.kind == "end":
            return ValueError("the expression ends too early")
        return ValueError(f"'{token.text}' at position {token.position + 1} is not expected there")

    def nested(self, parse):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ValueError(f"the expression is nested more than {MAX_DEPTH} levels deep")
        try:
            return parse()
        finally:
            self.depth -= 1

    # -- grammar -------------------------------------------------------------------------------

    def parse(self):
        node = self.conditional()
        if self.token.kind != "end":
            raise self.unexpected()
        return node

    def conditional(self):
        if self.dialect == "feel" and self.token.is_word("if"):
            self.advance()
            test = self.nested(self.conditional)
            self.expect_word("then")
            then = self.nested(self.conditional)
            self.expect_word("else")
            return ("cond", test, then, self.nested(self.conditional))
        node = self.disjunction()
        if self.dialect == "juel" and self.token.is_op("?"):
            self.advance()
            then = self.nested(self.conditional)
            self.expect_op(":", "in a ? b : c")
            return ("cond", node, then, self.nested(self.conditional))
        return node

    def expect_word(self, word: str) -> None:
        if not self.token.is_word(word):
            raise ValueError(f"'{word}' is missing (position {self.token.position + 1})")
        self.advance()

    def disjunction(self):
        node = self.conjunction()
        while self.token.is_word("or") or (self.dialect == "juel" and self.token.is_op("||")):
            self.advance()
            node = ("bool", "or", node, self.nested(self.conjunction))
        return node

    def conjunction(self):
        node = self.equality()
        while self.token.is_word("and") or (self.dialect == "juel" and self.token.is_op("&&")):
            self.advance()
            node = ("bool", "and", node, self.nested(self.equality))
        return node

    def equality(self):
        operators = _EQUALITY[self.dialect]
        node = self.relational()
        while self.token.text in operators and self.token.kind in ("op", "name"):
            op = operators[self.advance().text]
            node = ("cmp", op, node, self.nested(self.relational))
        if self.dialect == "juel" and self.token.is_op("="):
            raise ValueError(f"'=' at position {self.token.position + 1} assigns in JUEL; compare with ==")
        return node

    def relational(self):
        node = self.additive()
        while True:
            token = self.token
            if token.kind == "op" and token.text in _RELATIONAL:
                op = _RELATIONAL[token.text]
            elif self.dialect == "juel" and token.kind == "name" and token.text in _JUEL_RELATIONAL_WORDS:
                op = _JUEL_RELATIONAL_WORDS[token.text]
            elif self.dialect == "feel" and token.is_word("between"):
                self.advance()
                low = self.nested(self.additive)
                self.expect_word("and")
                node = ("between", node, low, self.nested(self.additive))
                continue
            elif self.dialect == "feel" and token.is_word("in", "instance"):
                raise ValueError(f"FEEL '{token.text}' (position {token.position + 1}) is not translated; "
                                 "compare with = or use 'or'")
            else:
                return node
            self.advance()
            node = ("cmp", op, node, self.nested(self.additive))

    def additive(self):
        node = self.multiplicative()
        while self.token.is_op("+", "-"):
            op = self.advance().text
            node = ("arith", op, node, self.nested(self.multiplicative))
        return node

    def multiplicative(self):
        node = self.unary()
        while True:
            token = self.token
            feel_modulo = self.dialect == "feel" and token.text == "%"  # FEEL has no %
            if token.kind == "op" and token.text in _MULTIPLICATIVE and not feel_modulo:
                op = _MULTIPLICATIVE[token.text]
            elif self.dialect == "juel" and token.kind == "name" and token.text in _JUEL_MULTIPLICATIVE_WORDS:
                op = _JUEL_MULTIPLICATIVE_WORDS[token.text]
            else:
                return node
            self.advance()
            node = ("arith", op, node, self.nested(self.unary))

    def unary(self):
        token = self.token
        if token.is_op("-"):
            self.advance()
            return ("neg", self.nested(self.unary))
        if self.dialect == "juel" and (token.is_op("!") or token.is_word("not")):
            self.advance()
            return ("not", self.nested(self.unary))
        if self.dialect == "juel" and token.is_word("empty"):
            self.advance()
            return ("empty", self.nested(self.unary))
        if self.dialect == "feel" and token.is_word("not") and self.tokens[self.at + 1].is_op("("):
            self.advance()
            self.advance()
            node = self.nested(self.conditional)
            self.expect_op(")", "to close not(")
            return self.postfix(("not", node))
        return self.postfix(self.primary())

    def primary(self):
        token = self.token
        if token.kind in ("number", "string"):
            self.advance()
            return ("lit", token.value)
        if token.is_op("("):
            self.advance()
            node = self.nested(self.conditional)
            self.expect_op(")", "to close a parenthesis")
            return node
        if token.kind == "name":
            if token.text in _LITERAL_WORDS:
                self.advance()
                return ("lit", _LITERAL_WORDS[token.text])
            if token.text in _RESERVED[self.dialect]:
                raise ValueError(f"'{token.text}' at position {token.position + 1} is not translated")
            self.advance()
            if self.token.is_op("("):
                raise ValueError(f"the function call {token.text}(...) at position {token.position + 1} is "
                                 "outside the subset Baton translates")
            return ("name", token.text)
        if token.is_op("["):
            raise ValueError(f"the list at position {token.position + 1} is outside the subset Baton translates")
        raise self.unexpected()

    def postfix(self, node):
        while True:
            token = self.token
            if token.is_op("."):
                self.advance()
                name = self.advance()
                if name.kind != "name":
                    raise ValueError(f"a property name is missing after '.' (position {token.position + 1})")
                if self.token.is_op("("):
                    node = self.spin_method(node, name)
                    continue
                node = ("get", node, ("lit", name.text))
            elif token.is_op("[") and self.indexing:
                self.advance()
                key = self.nested(self.conditional)
                self.expect_op("]", "to close an index")
                node = ("get", node, key)
            else:
                return node


    def spin_method(self, node, name: Token):
        """``node.name(...)``, the cursor at its "(": one of Spin's JSON reading methods, else refused."""
        if self.dialect != "juel" or (name.text not in SPIN_VALUE_METHODS and name.text not in SPIN_KEY_METHODS):
            raise ValueError(f"the method call {name.text}(...) at position {name.position + 1} is outside the "
                             "subset Baton translates")
        self.advance()
        if name.text in SPIN_VALUE_METHODS:
            self.expect_op(")", f"after {name.text}(, which takes no argument")
            return node
        key = self.nested(self.conditional)
        self.expect_op(")", f"to close {name.text}(")
        return (SPIN_KEY_METHODS[name.text], node, key)


def parse(source: str, dialect: str, offset: int = 0):
    """The tree of ``source`` in ``dialect``; ValueError with a sentence naming what is not translated.
    ``offset`` is where ``source`` starts in the text as written (positions in messages count from there)."""
    return Parser(source, dialect, offset).parse()
