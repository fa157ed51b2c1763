"""What the engine runs today: the one table a deploy is checked against.

Anything in the BPMN namespace that this table does not name is refused at deploy with
"<element> is not supported yet" (an allowlist, so a new BPMN construct is never silently
mis-run). Support for something new starts with one line here. Elements of other namespaces
(diagram interchange, vendor extensions) never execute and are ignored.
"""
from __future__ import annotations

_COMMON = frozenset({"documentation", "extensionElements", "incoming", "outgoing"})

# Executable elements of a process -> the child elements each may carry. A child not listed
# refuses its parent: "task with multiInstanceLoopCharacteristics is not supported yet".
FLOW_ELEMENTS: dict[str, frozenset[str]] = {
    "startEvent": _COMMON,                                   # none start; see TRIGGERS
    "endEvent": _COMMON | {"terminateEventDefinition"},      # none and terminate end
    "task": _COMMON,
    "scriptTask": _COMMON | {"script"},                      # Python, see SCRIPT_FORMATS
    "userTask": _COMMON,
    "manualTask": _COMMON,
    "serviceTask": _COMMON,                                  # only with an ENABLED_OPERATORS operator
    "exclusiveGateway": _COMMON,
    "parallelGateway": _COMMON,
    "inclusiveGateway": _COMMON,
    "sequenceFlow": frozenset({"documentation", "extensionElements", "conditionExpression"}),
}

# Non-executable decoration: accepted anywhere in a process, ignored with everything inside it.
# Data associations go too: data objects are drawings here, not SpiffWorkflow data stores.
DECORATION = frozenset({
    "documentation", "extensionElements", "textAnnotation", "association", "group", "category",
    "laneSet", "lane", "dataObject", "dataObjectReference", "dataStoreReference",
    "dataInputAssociation", "dataOutputAssociation",
})

# Children of <definitions> besides <process>: declarations that do nothing unless an element
# refers to them (and such elements are refused), or diagrams of pools and message flows.
ROOT_DECLARATIONS = frozenset({
    "collaboration", "message", "signal", "error", "escalation", "itemDefinition", "category",
    "dataStore", "interface", "resource", "import", "extension", "relationship",
    "correlationProperty", "partnerEntity", "partnerRole", "endPoint", "documentation",
    "extensionElements",
})

# Elements removed from the tree before SpiffWorkflow parses it, because Spiff would give them
# meaning that Baton does not (it would try to move data objects, or insist on a store class).
STRIPPED_BEFORE_SPIFF = frozenset({"dataInputAssociation", "dataOutputAssociation", "dataStore"})

# serviceTask ``operator`` values of the profile. Enabling one the engine has learnt to run is
# adding it to ENABLED_OPERATORS; known but not enabled ones are refused as "not supported yet".
KNOWN_OPERATORS = ("http", "send_message", "ai_chat")
ENABLED_OPERATORS: frozenset[str] = frozenset()

# startEvent ``trigger`` values -> whether the start event also needs a ``channel`` property.
TRIGGERS = {"webhook": False, "webchat": True, "telegram": True, "whatsapp": True, "viber": True}

# scriptTask ``scriptFormat`` values taken to mean Python (no format at all means Python too).
SCRIPT_FORMATS = frozenset({"python", "python3", "py", "text/python", "text/x-python",
                            "application/x-python"})

# conditionExpression ``language`` values taken to mean Python.
EXPRESSION_LANGUAGES = SCRIPT_FORMATS


def element_refusal(tag: str, event_definitions: list[str]) -> str:
    """The sentence for an element type that is not in the table."""
    if event_definitions:
        return f"{tag} with {' and '.join(event_definitions)} is not supported yet."
    return f"{tag} is not supported yet."


def child_refusal(parent_tag: str, child_tag: str) -> str:
    """The sentence for an allowed element carrying a child that is not in the table."""
    return f"{parent_tag} with {child_tag} is not supported yet."
