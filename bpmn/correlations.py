"""Message correlation as a model declares it, recorded at deploy for the engine's delivery.

BPMN (and SpiffArena) correlate by *properties*: a ``correlationProperty`` has, per message, a
retrieval expression over the message's payload (``<formalExpression>order_id</formalExpression>``);
a ``correlationKey`` groups properties into a conversation. A message reaches an instance only when
the property values it carries equal those the instance got from the earlier messages of the
conversation (SpiffWorkflow's rule). Camunda models declare nothing: Camunda correlates by business
key and variables given with the message, which ``message.correlate`` does.

SpiffWorkflow would evaluate these inside one workflow; Baton delivers messages between instances,
so deploy records ``{message name: {property id: Python expression over the payload}}`` for the
engine, each expression checked by the sandbox (and correlation stays out of the specs).
"""
from __future__ import annotations

from lxml import etree

from bpmn.checks.elements import bpmn_children
from bpmn.issues import Issues, local_name
from bpmn.profile import BPMN_NS
from engine.sandbox import check_expression

_RETRIEVAL = f"{{{BPMN_NS}}}correlationPropertyRetrievalExpression"


def correlations_of(root: etree._Element, issues: Issues | None = None) -> dict[str, dict[str, str]]:
    """Per message name, the correlation properties it carries and how to read each from its payload.
    With ``issues``, an expression the sandbox refuses (or a messageRef naming no message) is added."""
    names = {m.get("id"): (m.get("name") or "").strip() or m.get("id")
             for m in bpmn_children(root) if local_name(m) == "message" and m.get("id")}
    found: dict[str, dict[str, str]] = {}
    for prop in bpmn_children(root):
        if local_name(prop) != "correlationProperty" or not prop.get("id"):
            continue
        for retrieval in prop.iter(_RETRIEVAL):
            message = names.get(retrieval.get("messageRef"))
            expression = " ".join(" ".join(retrieval.itertext()).split())
            problem = None
            if message is None:
                problem = f"messageRef '{retrieval.get('messageRef')}' names no bpmn:message of this file."
            elif not expression:
                problem = "has no expression (the value to read from the message, such as order_id)."
            elif check_expression(expression):
                problem = f"expression '{expression}' cannot run: {check_expression(expression).rstrip('.')}."
            if problem is not None:
                if issues is not None:
                    issues.add(prop, f"correlationProperty '{prop.get('id')}' {problem}", at=retrieval)
                continue
            found.setdefault(message, {})[prop.get("id")] = expression
    return found
