"""Reading an uploaded BPMN file into an lxml tree without trusting it.

An upload is hostile until proven otherwise: no DTD is loaded, no entity is expanded, nothing is
fetched, and a file that declares a DOCTYPE at all is refused (that is where XXE and
billion-laughs payloads live, and no modeler writes one).
"""
from __future__ import annotations

from lxml import etree

from bpmn.issues import issue
from engine.errors import BpmnValidationError

BPMN_MODEL_NS = "http://www.omg.org/spec/BPMN/20100524/MODEL"
DEFINITIONS_TAG = f"{{{BPMN_MODEL_NS}}}definitions"
DOCTYPE_MESSAGE = ("The file declares a DOCTYPE, which is not allowed in a BPMN upload "
                   "(DTDs and entity declarations are refused).")


def _hardened_parser(encoding: str | None, **extra) -> etree.XMLParser:
    # A new parser per call: lxml parsers are not safe to share between threads.
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
        encoding=encoding,
        **extra,
    )


def read_bpmn_xml(source: str | bytes) -> etree._ElementTree:
    """The parsed tree of a BPMN upload, or BpmnValidationError with one file-level issue."""
    tree = read_xml(source, "BPMN")
    _refuse_foreign_root(tree.getroot())
    return tree


def read_xml(source: str | bytes, what: str) -> etree._ElementTree:
    """The parsed tree of an uploaded ``what`` file (BPMN, DMN), under the rules above; BpmnValidationError
    with one file-level issue otherwise. The caller checks the root element."""
    if isinstance(source, str):
        # lxml refuses str input that carries an encoding declaration; the text is already decoded,
        # so encode it ourselves and tell the parser to ignore whatever the declaration says.
        data, encoding = source.encode("utf-8"), "utf-8"
    elif isinstance(source, (bytes, bytearray)):
        # Bytes keep their declared encoding (or BOM); the parser honours it.
        data, encoding = bytes(source), None
    else:
        raise BpmnValidationError([issue(None, None, f"The {what} file must be text.")])
    if not data.strip():
        raise BpmnValidationError([issue(None, None, f"The {what} file is empty.")])
    parser = _hardened_parser(encoding)
    try:
        tree = etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as exc:
        if _declares_doctype(data, encoding):
            raise BpmnValidationError([issue(None, _doctype_line(data), _doctype_message(what))]) from exc
        line = exc.lineno if isinstance(exc.lineno, int) and exc.lineno > 0 else None
        reason = (exc.msg or str(exc)).strip().rstrip(".")
        raise BpmnValidationError(
            [issue(None, line, f"The file is not well-formed XML: {reason}.")]) from exc
    _refuse_doctype(tree, data, what)
    return tree


def _declares_doctype(data: bytes, encoding: str | None) -> bool:
    """Whether a file that failed to parse has a DOCTYPE: entity payloads (XXE, billion laughs)
    usually fail on their entities, and the DOCTYPE is the reason worth reporting."""
    try:
        root = etree.fromstring(data, _hardened_parser(encoding, recover=True))
    except (etree.XMLSyntaxError, ValueError):
        return False
    if root is None:
        return False
    info = root.getroottree().docinfo
    return bool(info.doctype) or info.internalDTD is not None


def _doctype_message(what: str) -> str:
    return DOCTYPE_MESSAGE.replace("a BPMN upload", f"a {what} upload")


def _refuse_doctype(tree: etree._ElementTree, data: bytes, what: str) -> None:
    info = tree.docinfo
    # With load_dtd=False and resolve_entities=False nothing was expanded or fetched; still, a
    # DOCTYPE (internal subset, ENTITY declarations, external id) has no business in a BPMN file.
    if info.doctype or info.internalDTD is not None or info.externalDTD is not None:
        raise BpmnValidationError([issue(None, _doctype_line(data), _doctype_message(what))])
    if any(isinstance(node, etree._Entity) for node in tree.getroot().iter()):
        # An entity reference without a DOCTYPE cannot be well-formed; kept as a second lock.
        raise BpmnValidationError([issue(None, None, "The file uses XML entities, which are not allowed.")])


def _doctype_line(data: bytes) -> int | None:
    position = data.find(b"<!DOCTYPE")  # ASCII-compatible encodings; others get no line
    return data.count(b"\n", 0, position) + 1 if position >= 0 else None


def _refuse_foreign_root(root: etree._Element) -> None:
    if root.tag == DEFINITIONS_TAG:
        return
    name = etree.QName(root).localname if isinstance(root.tag, str) else str(root.tag)
    namespace = etree.QName(root).namespace if isinstance(root.tag, str) else None
    where = f" in namespace {namespace}" if namespace else " without a namespace"
    raise BpmnValidationError([issue(
        root.get("id"), root.sourceline,
        f"The root element is '{name}'{where}, not a BPMN 2.0 'definitions' element "
        f"({BPMN_MODEL_NS}).")])
