"""The checked tree rewritten into what SpiffWorkflow 3.2 reads, just before its parser sees it.

Data associations, data stores and correlation declarations go (Baton gives them no meaning that
Spiff would act on); Camunda Modeler's multi-instance attributes become the BPMN elements Spiff
reads; JUEL and FEEL conditions and loop expressions become their Python translation (the checks
have already refused any that cannot be translated).
"""
from __future__ import annotations

from lxml import etree

from bpmn import profile
from bpmn.allowlist import STRIPPED_BEFORE_SPIFF
from bpmn.checks.loops import camunda, collection_variable, zeebe_loop
from bpmn.checks.process import called_element
from bpmn.expressions import translate
from bpmn.issues import local_name

_BPMN = f"{{{profile.BPMN_NS}}}"
# Elements whose text is a condition or expression SpiffWorkflow evaluates (timers are read by
# bpmn.timers itself).
_EXPRESSION_TAGS = ("conditionExpression", "loopCondition", "completionCondition", "loopCardinality")


def prepare_for_spiff(root: etree._Element, called: list[etree._Element]) -> None:
    """Rewrites ``root`` in place; ``called`` are the processes of the file that entry processes call,
    which run inside their caller whatever their isExecutable says (Spiff refuses to parse those
    marked not executable)."""
    for process in called:
        process.set("isExecutable", "true")
    for call in root.iter(f"{_BPMN}callActivity"):  # Camunda 8 names the called process in zeebe:calledElement
        if not call.get("calledElement") and called_element(call):
            call.set("calledElement", called_element(call))
    _strip(root)
    _spell_camunda_collections(root)
    _translate_expressions(root)


def _strip(root: etree._Element) -> None:
    doomed = [el for el in root.iter() if isinstance(el.tag, str)
              and etree.QName(el).namespace == profile.BPMN_NS and local_name(el) in STRIPPED_BEFORE_SPIFF]
    for element in doomed:
        element.getparent().remove(element)


def _spell_camunda_collections(root: etree._Element) -> None:
    """Camunda Modeler's multi-instance "Collection"/"Element variable" attributes (Camunda 8:
    zeebe:loopCharacteristics), written as the loopDataInputRef/inputDataItem (and output)
    elements SpiffWorkflow reads (checks have validated them)."""
    for loop in root.iter(f"{_BPMN}multiInstanceLoopCharacteristics"):
        zeebe = {key: collection_variable(value.strip()) for key, value in zeebe_loop(loop).items()}
        spelled = (("loopDataInputRef", loop.get(camunda("collection")) or zeebe.get("inputCollection"), None),
                   ("inputDataItem", loop.get(camunda("elementVariable")) or zeebe.get("inputElement"), "id"),
                   ("loopDataOutputRef", zeebe.get("outputCollection"), None),
                   ("outputDataItem", zeebe.get("outputElement"), "id"))
        for tag, value, attribute in spelled:
            value = collection_variable((value or "").strip())
            if value and loop.find(f"{_BPMN}{tag}") is None:
                child = etree.SubElement(loop, f"{_BPMN}{tag}")
                if attribute:
                    child.set(attribute, value)
                else:
                    child.text = value


def _translate_expressions(root: etree._Element) -> None:
    for tag in _EXPRESSION_TAGS:
        for node in root.iter(f"{_BPMN}{tag}"):
            translation = translate(node.text or "")
            if translation.dialect is not None and translation.python is not None:
                node.text = translation.python
                node.attrib.pop("language", None)
    for tag in ("loopDataInputRef", "loopDataOutputRef"):
        for node in root.iter(f"{_BPMN}{tag}"):
            node.text = collection_variable((node.text or "").strip()) or node.text
