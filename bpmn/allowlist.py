"""What the engine runs today: the one table a deploy is checked against.

Anything in the BPMN namespace that this table does not name is refused at deploy with
"<element> is not supported yet" (an allowlist, so a new BPMN construct is never silently
mis-run). Support for something new starts with one line here. Elements of other namespaces
(diagram interchange, vendor extensions) never execute and are ignored.

Where an element is allowed only in some places (a message start event only opens an event
subprocess, a cycle timer only repeats where something can repeat) the rule and its sentence live
in ``bpmn.checks.events``; this table says which children an element may carry at all.
"""
from __future__ import annotations

from bpmn.operators import AI_CHAT, HTTP, SEND_MESSAGE

_COMMON = frozenset({"documentation", "extensionElements", "incoming", "outgoing"})
LOOPS = frozenset({"standardLoopCharacteristics", "multiInstanceLoopCharacteristics"})
# Data an activity declares: ``ioSpecification`` runs as SpiffWorkflow runs it (the data inputs must
# exist and are all the activity sees; its data outputs are all it passes on), ``property`` (Camunda
# Modeler's __targetRef_placeholder for data associations) is ignored.
DATA_DECLARATIONS = frozenset({"ioSpecification", "property"})
_ACTIVITY = _COMMON | LOOPS | DATA_DECLARATIONS  # the activities a loop may repeat

# Executable elements of a process -> the child elements each may carry. A child not listed
# refuses its parent: "task with ioSpecification is not supported yet".
FLOW_ELEMENTS: dict[str, frozenset[str]] = {
    # none start; timer, message and signal start (top level and event subprocesses);
    # error/escalation start of an event subprocess only. See TRIGGERS for the profile's start triggers.
    "startEvent": _COMMON | {"timerEventDefinition", "messageEventDefinition", "signalEventDefinition",
                             "errorEventDefinition", "escalationEventDefinition"},
    # A message end or throw event throws its message by name with the thrower's variables;
    # SpiffWorkflow hands one nothing in the instance catches to the engine (workflow.get_events()),
    # which delivers it to the tenant's instances. A signal goes to every catcher, here and there.
    # A cancel end event cancels the transaction around it (bpmn.checks.events: only there).
    "endEvent": _COMMON | {"terminateEventDefinition", "errorEventDefinition", "escalationEventDefinition",
                           "messageEventDefinition", "signalEventDefinition", "cancelEventDefinition"},
    # A conditional catch or boundary event waits until its condition holds (bpmn.events).
    "intermediateCatchEvent": _COMMON | {"timerEventDefinition", "messageEventDefinition", "signalEventDefinition",
                                         "conditionalEventDefinition"},
    "intermediateThrowEvent": _COMMON | {"escalationEventDefinition", "messageEventDefinition",
                                         "signalEventDefinition"},
    "boundaryEvent": _COMMON | {"timerEventDefinition", "messageEventDefinition", "signalEventDefinition",
                                "errorEventDefinition", "escalationEventDefinition", "conditionalEventDefinition",
                                "cancelEventDefinition"},
    "task": _ACTIVITY,
    "scriptTask": _ACTIVITY | {"script"},                    # Python, see SCRIPT_FORMATS
    "userTask": _ACTIVITY,
    "manualTask": _ACTIVITY,
    "serviceTask": _ACTIVITY,                                # an operator, else an external task
    "sendTask": _ACTIVITY,                                   # a messageRef, else an external task
    "businessRuleTask": _ACTIVITY,                           # a DMN decision deployed with it, else external
    "receiveTask": _COMMON,                                  # with a messageRef
    "callActivity": _ACTIVITY,                               # calledElement: another definition's code
    "subProcess": _ACTIVITY,                                 # embedded, or an event subprocess
    # Runs as an embedded subProcess; its cancel end events and cancel boundary, not compensation.
    "transaction": _COMMON | DATA_DECLARATIONS,
    "exclusiveGateway": _COMMON,
    "parallelGateway": _COMMON,
    "inclusiveGateway": _COMMON,
    "eventBasedGateway": _COMMON,
    "sequenceFlow": frozenset({"documentation", "extensionElements", "conditionExpression"}),
}

# Children of <process> itself that are not flow content (a process's data inputs and outputs).
PROCESS_DECLARATIONS = DATA_DECLARATIONS

# Elements whose children are a process of their own, checked like the top-level process.
CONTAINERS = frozenset({"subProcess", "transaction"})

# The event definitions one event may combine (BPMN's "multiple": any of them; "parallel multiple",
# parallelMultiple="true": all of them): a start event of the process, each part starting it (a
# timer start stays an event of its own: Baton schedules it); a catch or boundary event, waiting.
MULTIPLE_DEFINITIONS = {"startEvent": frozenset({"messageEventDefinition", "signalEventDefinition"}),
                        "intermediateCatchEvent": frozenset({"messageEventDefinition", "signalEventDefinition",
                                                             "timerEventDefinition"}),
                        "boundaryEvent": frozenset({"messageEventDefinition", "signalEventDefinition",
                                                    "timerEventDefinition"})}

# Every element BPMN 2.0 allows inside a process or subprocess. Inside a container these are its
# content (checked by the container's own pass); any other child is the container's own attribute.
BPMN_FLOW_CONTENT = frozenset({
    "task", "userTask", "manualTask", "scriptTask", "serviceTask", "sendTask", "receiveTask",
    "businessRuleTask", "callActivity", "subProcess", "transaction", "adHocSubProcess",
    "callChoreography", "subChoreography", "choreographyTask", "startEvent", "endEvent",
    "intermediateCatchEvent", "intermediateThrowEvent", "boundaryEvent", "implicitThrowEvent",
    "exclusiveGateway", "inclusiveGateway", "parallelGateway", "eventBasedGateway", "complexGateway",
    "sequenceFlow", "dataObject", "dataObjectReference", "dataStoreReference", "textAnnotation",
    "association", "group", "laneSet",
})

# Non-executable decoration: accepted anywhere in a process, ignored with everything inside it.
# Data associations go too: data objects are drawings here, not SpiffWorkflow data stores.
# correlationSubscription is ignored: correlation properties (read at deploy, bpmn.correlations)
# are what the engine matches messages between instances by.
DECORATION = frozenset({
    "documentation", "extensionElements", "textAnnotation", "association", "group", "category",
    "laneSet", "lane", "dataObject", "dataObjectReference", "dataStoreReference",
    "dataInputAssociation", "dataOutputAssociation", "correlationSubscription",
})

# Children of <definitions> besides <process>: declarations that do nothing unless an element
# refers to them, or diagrams of pools and message flows.
ROOT_DECLARATIONS = frozenset({
    "collaboration", "message", "signal", "error", "escalation", "itemDefinition", "category",
    "dataStore", "interface", "resource", "import", "extension", "relationship",
    "correlationProperty", "partnerEntity", "partnerRole", "endPoint", "documentation",
    "extensionElements",
})

# Elements removed from the tree before SpiffWorkflow parses it, because Spiff would give them
# meaning that Baton does not (it would try to move data objects, insist on a store class, or
# refuse a correlation property without retrieval expressions that Baton ignores anyway).
# Data objects go with them: SpiffWorkflow would add an empty ``data_objects`` entry to the variables.
STRIPPED_BEFORE_SPIFF = frozenset({"dataInputAssociation", "dataOutputAssociation", "dataStore",
                                   "dataObject", "dataObjectReference", "dataStoreReference",
                                   "correlationProperty", "correlationKey", "correlationSubscription"})

# serviceTask ``operator`` values of the profile. Enabling one the engine has learnt to run is
# adding it to ENABLED_OPERATORS; known but not enabled ones are refused as "not supported yet".
KNOWN_OPERATORS = (HTTP, SEND_MESSAGE, AI_CHAT)
ENABLED_OPERATORS: frozenset[str] = frozenset({HTTP, SEND_MESSAGE, AI_CHAT})

# The http operator's properties (bpmn.checks.operators checks their values).
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
HTTP_TIMEOUT_S = (1, 60)
HTTP_RETRIES = (0, 10)

# The send_message operator's buttons (each messenger has its own, lower limits).
MAX_MESSAGE_BUTTONS = 100

# The ai_chat operator's properties.
AI_MAX_TURNS = (1, 1000)
AI_MAX_KNOWLEDGE = 200_000   # characters of the knowledge text
AI_MAX_MODEL_NAME = 200
AI_MAX_KEYWORD = 100

# startEvent ``trigger`` values -> whether the start event also needs a ``channel`` property.
# A top-level timer start event needs no trigger: its timer is its trigger ('timer').
TRIGGERS = {"webhook": False, "webchat": True, "telegram": True, "whatsapp": True, "viber": True}

# The ``undelivered`` property of a message throw (end and throw events, send tasks): what becomes
# of a message no instance waits for and no process starts with.
UNDELIVERED = ("fail", "drop")

# scriptTask ``scriptFormat`` values taken to mean Python (no format at all means Python too).
SCRIPT_FORMATS = frozenset({"python", "python3", "py", "text/python", "text/x-python",
                            "application/x-python"})

# conditionExpression ``language`` values Baton reads: Python, or JUEL/FEEL translated into Python
# at deploy (``bpmn.expressions``; the text's ${...} or leading = says which).
EXPRESSION_LANGUAGES = SCRIPT_FORMATS | {"juel", "feel", "http://www.omg.org/spec/feel/20140401",
                                         "https://www.omg.org/spec/dmn/20191111/feel/"}

# Caps checked at deploy on literal values (the engine caps at runtime too).
MAX_LOOP_CARDINALITY = 1000   # loopCardinality and loopMaximum
MAX_TIMER_CYCLES = 1000       # R<n>/... of a timeCycle


def element_refusal(tag: str, event_definitions: list[str]) -> str:
    """The sentence for an element type that is not in the table."""
    if event_definitions:
        return f"{tag} with {' and '.join(event_definitions)} is not supported yet."
    return f"{tag} is not supported yet."


def child_refusal(parent_tag: str, child_tag: str) -> str:
    """The sentence for an allowed element carrying a child that is not in the table."""
    return f"{parent_tag} with {child_tag} is not supported yet."
