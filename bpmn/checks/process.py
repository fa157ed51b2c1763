"""Which processes of a file Baton deploys, and the start events each may have.

A file's *entry* processes are its executable processes that no callActivity of the file calls;
each becomes a definition (``parse_definitions``; ``parse_definition`` wants exactly one). A
process of the file that a callActivity calls travels inside its caller's definition, executable or
not. Pools that only document a partner are marked ``isExecutable="false"`` and are ignored.

A process may have several start events when each has its own trigger, so that whatever starts an
instance names one of them: at most one without any (``process.start``), webhook and timer starts
(each its own), a channel at most once, a message or signal name at most once.
"""
from __future__ import annotations

from lxml import etree

from bpmn import profile
from bpmn.checks.elements import bpmn_children, event_definition, is_multiple
from bpmn.issues import Issues, local_name
from bpmn.parser import message_name, signal_name

_FIX = 'set isExecutable="true" on the process Baton should run'


def is_executable(process: etree._Element) -> bool:
    # SpiffWorkflow's own reading: absent means executable, anything but "true" means not.
    return process.get("isExecutable", "true") == "true"


def processes_of(root: etree._Element) -> list[etree._Element]:
    return [child for child in bpmn_children(root) if local_name(child) == "process"]


def called_in_file(process: etree._Element) -> list[etree._Element]:
    """The processes of the same file that ``process`` calls, directly or through them, in call order."""
    by_id = {p.get("id"): p for p in processes_of(process.getroottree().getroot()) if p.get("id")}
    found: dict[str, etree._Element] = {}
    todo = [process]
    while todo:
        for call in todo.pop().iter(f"{{{profile.BPMN_NS}}}callActivity"):
            called = called_element(call)
            if called in by_id and called not in found and by_id[called] is not process:
                found[called] = by_id[called]
                todo.append(by_id[called])
    return list(found.values())


def called_element(call: etree._Element) -> str:
    """What a callActivity calls: ``calledElement``, or Camunda 8's ``zeebe:calledElement processId``."""
    called = (call.get("calledElement") or "").strip()
    if not called:
        zeebe = call.find(f"./{{{profile.BPMN_NS}}}extensionElements/{{{profile.ZEEBE_NS}}}calledElement")
        called = (zeebe.get("processId") or "").strip() if zeebe is not None else ""
    return called


def entry_processes(root: etree._Element) -> list[etree._Element]:
    """Executable processes that no other process of the file calls (all executable ones, if every
    one is called: a cycle of calls is reported by the call checks)."""
    executable = [p for p in processes_of(root) if is_executable(p)]
    called = {p.get("id") for caller in executable for p in called_in_file(caller)}
    return [p for p in executable if p.get("id") not in called] or executable


def select_processes(root: etree._Element, issues: Issues) -> tuple[list[etree._Element], list[etree._Element]]:
    """(the entry processes to deploy, the processes whose elements are worth checking)."""
    processes = processes_of(root)
    if not processes:
        issues.add_raw(None, root.sourceline, "The file has no process.")
        return [], []
    entries = entry_processes(root)
    if not entries:
        if len(processes) == 1:
            message = (f"Process '{processes[0].get('id')}' is marked isExecutable=\"false\"; "
                       f'set isExecutable="true" to deploy it.')
        else:
            names = ", ".join(f"'{p.get('id')}'" for p in processes)
            message = f'No process is executable ({names} are marked isExecutable="false"); {_FIX}.'
        issues.add(processes[0], message)
        # Checked anyway, so the modeler learns in one round what else stands in the way.
        return [], processes
    for entry in entries:
        if not entry.get("id"):
            issues.add(entry, "The process has no id.")
    to_check = list(dict.fromkeys([*entries, *(p for e in entries for p in called_in_file(e))]))
    return [e for e in entries if e.get("id")], to_check


def select_process(root: etree._Element, issues: Issues) -> tuple[etree._Element | None, list[etree._Element]]:
    """The one entry process of a file (``parse_definition``), or None with the problem added."""
    entries, to_check = select_processes(root, issues)
    if len(entries) > 1:
        names = ", ".join(f"'{p.get('id')}'" for p in entries)
        issues.add(entries[1], f"The file has {len(entries)} executable processes ({names}); deploy it "
                               "as a collaboration (each pool becomes a definition), or mark the others "
                               'isExecutable="false".')
        return None, to_check
    return (entries[0] if entries else None), to_check


def check_start_events(process: etree._Element, issues: Issues) -> None:
    starts = [child for child in bpmn_children(process) if local_name(child) == "startEvent"]
    if not starts:
        issues.add(process, "The process has no start event.")
    by_trigger: dict[tuple, list[etree._Element]] = {}
    for start in starts:
        by_trigger.setdefault(start_trigger(start), []).append(start)
    for trigger, same in by_trigger.items():
        if len(same) > 1 and trigger[0] not in ("webhook", "timer"):
            names = ", ".join(f"'{s.get('id')}'" for s in same)
            issues.add(same[1], f"The process has {len(same)} start events {_TRIGGER_WORDS[trigger[0]](trigger)} "
                                f"({names}); whatever starts an instance must name one of them. Give each its "
                                "own trigger (webhook, a channel, a timer or a message), or keep one.")


_TRIGGER_WORDS = {
    "none": lambda t: "without a trigger, which process.start would choose between",
    "message": lambda t: f"for the message '{t[1]}'",
    "signal": lambda t: f"for the signal '{t[1]}'",
    "channel": lambda t: f"for the {t[1]} channel '{t[2]}'",
    "multiple": lambda t: "for the same messages and signals",
}


def start_trigger(start: etree._Element) -> tuple:
    """What starts the process at this start event: ("none",), ("webhook", id), ("timer", id),
    ("message", name), ("signal", name), ("channel", type, channel) or, for a multiple start event,
    ("multiple", ((kind, name), ...), parallel)."""
    definition = event_definition(start)
    kind = local_name(definition) if definition is not None else None
    if kind == "timerEventDefinition":
        return ("timer", start.get("id"))
    if kind == "messageEventDefinition":
        return ("message", message_name(definition) or definition.get("messageRef") or "")
    if kind == "signalEventDefinition":
        return ("signal", signal_name(definition) or definition.get("signalRef") or "")
    if is_multiple(start):
        parts = tuple(("message", message_name(part) or part.get("messageRef") or "")
                      if local_name(part) == "messageEventDefinition"
                      else ("signal", signal_name(part) or part.get("signalRef") or "")
                      for part in bpmn_children(start) if local_name(part).endswith("EventDefinition"))
        return ("multiple", parts, start.get("parallelMultiple") == "true")
    properties = profile.read_properties(start)
    trigger = (properties.get("trigger") or "").strip()
    if trigger == "webhook":
        return ("webhook", start.get("id"))
    if trigger:
        return ("channel", trigger, (properties.get("channel") or "").strip())
    return ("none",)
