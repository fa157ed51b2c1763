"""Sequence flows: where they go, and where a condition is needed, allowed or meaningless.

SpiffWorkflow stops at the first flow problem with a terse message, and silently ignores a
condition on a flow that leaves a task; these checks name every such flow instead.
"""
from __future__ import annotations

from collections import defaultdict

from lxml import etree

from bpmn.allowlist import FLOW_ELEMENTS
from bpmn.checks.elements import bpmn_children, container_word, content, flow_nodes, is_event_subprocess
from bpmn.issues import Issues, local_name

CONDITIONAL_GATEWAYS = ("exclusiveGateway", "inclusiveGateway")
_NO_INCOMING = ("startEvent", "boundaryEvent")


def condition_of(flow: etree._Element) -> etree._Element | None:
    for child in bpmn_children(flow):
        if local_name(child) == "conditionExpression":
            return child
    return None


def flow_index(container: etree._Element) -> tuple[dict[str, list], dict[str, list]]:
    """(outgoing, incoming) sequence flows by element id, of flows whose ends exist."""
    nodes = flow_nodes(container)
    outgoing: dict[str, list[etree._Element]] = defaultdict(list)
    incoming: dict[str, list[etree._Element]] = defaultdict(list)
    for flow in content(container):
        if local_name(flow) == "sequenceFlow":
            for attribute, index in (("sourceRef", outgoing), ("targetRef", incoming)):
                if flow.get(attribute) in nodes:
                    index[flow.get(attribute)].append(flow)
    return outgoing, incoming


def check_flows(container: etree._Element, issues: Issues) -> None:
    nodes = flow_nodes(container)
    where = container_word(container)
    for flow in content(container):
        if local_name(flow) != "sequenceFlow":
            continue
        for attribute in ("sourceRef", "targetRef"):
            ref = flow.get(attribute)
            if not ref:
                issues.add(flow, f"sequenceFlow has no {attribute}.")
            elif ref not in nodes:
                issues.add(flow, f"sequenceFlow {attribute} '{ref}' is not an element of this {where}.")
    outgoing, incoming = flow_index(container)
    for node_id, node in nodes.items():
        tag = local_name(node)
        if tag in FLOW_ELEMENTS:  # refused elements already have their message
            _check_node(node, tag, outgoing[node_id], incoming[node_id], issues)


def _check_node(node, tag: str, outs: list, ins: list, issues: Issues) -> None:
    if tag in _NO_INCOMING and ins:
        issues.add(node, f"{tag} cannot have incoming sequence flows.")
    if is_event_subprocess(node):
        if ins or outs:
            issues.add(node, "An event subProcess (triggeredByEvent) cannot have incoming or outgoing "
                             "sequence flows; its start event starts it.")
    elif tag == "endEvent" and outs:
        issues.add(node, "endEvent cannot have outgoing sequence flows.")
    elif tag == "eventBasedGateway":
        for flow in outs:
            if condition_of(flow) is not None:
                issues.add(flow, f"sequenceFlow leaves eventBasedGateway '{node.get('id')}' with a "
                                 "condition; the event that happens first chooses the way.")
    elif tag in CONDITIONAL_GATEWAYS:
        _check_conditional_gateway(node, tag, outs, issues)
    elif tag == "parallelGateway":
        for flow in outs:
            if condition_of(flow) is not None:
                issues.add(flow, f"sequenceFlow leaves parallelGateway '{node.get('id')}' with a condition, "
                                 "which a parallel gateway would ignore; use an inclusiveGateway.")
    else:
        _check_activity(node, tag, outs, issues)


def _check_conditional_gateway(gateway, tag: str, outs: list, issues: Issues) -> None:
    default = gateway.get("default")
    ids = {flow.get("id") for flow in outs}
    if default and default not in ids:
        issues.add(gateway, f"{tag} default flow '{default}' is not one of its outgoing sequence flows.")
    if len(outs) < 2:
        return  # a single way out is taken as the default, as SpiffWorkflow does
    for flow in outs:
        if flow.get("id") != default and condition_of(flow) is None:
            issues.add(flow, f"sequenceFlow leaves {tag} '{gateway.get('id')}' without a condition "
                             "and is not the gateway's default flow.")


def _check_activity(node, tag: str, outs: list, issues: Issues) -> None:
    if len(outs) > 1 and tag != "startEvent":
        issues.add(node, f"{tag} has {len(outs)} outgoing sequence flows; put a parallelGateway or "
                         "an exclusiveGateway after it to split the flow.")
    for flow in outs:
        if condition_of(flow) is not None:
            issues.add(flow, f"Conditional sequence flows leaving a {tag} are not supported yet; "
                             "put an exclusiveGateway before the branches.")
