"""Which process of a file Baton deploys.

One definition is one process. A file may hold several <process> elements (the pools of a
collaboration); the one Baton runs is the one marked executable. Decision: with several
executable processes the file is refused, naming them, rather than silently deploying the first
and dropping the others' logic; pools that only document a partner are marked
``isExecutable="false"`` (Camunda Modeler: the "Executable" checkbox) and are ignored.
"""
from __future__ import annotations

from lxml import etree

from bpmn.checks.elements import bpmn_children
from bpmn.issues import Issues, local_name

_FIX = 'set isExecutable="true" on the process Baton should run'


def is_executable(process: etree._Element) -> bool:
    # SpiffWorkflow's own reading: absent means executable, anything but "true" means not.
    return process.get("isExecutable", "true") == "true"


def select_process(root: etree._Element,
                   issues: Issues) -> tuple[etree._Element | None, list[etree._Element]]:
    """(the process to deploy or None, the processes whose elements are worth checking)."""
    processes = [child for child in bpmn_children(root) if local_name(child) == "process"]
    if not processes:
        issues.add_raw(None, root.sourceline, "The file has no process.")
        return None, []
    executable = [process for process in processes if is_executable(process)]
    if not executable:
        if len(processes) == 1:
            message = (f"Process '{processes[0].get('id')}' is marked isExecutable=\"false\"; "
                       f'set isExecutable="true" to deploy it.')
        else:
            names = ", ".join(f"'{p.get('id')}'" for p in processes)
            message = f'No process is executable ({names} are marked isExecutable="false"); {_FIX}.'
        issues.add(processes[0], message)
        # Checked anyway, so the modeler learns in one round what else stands in the way.
        return None, processes
    if len(executable) > 1:
        names = ", ".join(f"'{p.get('id')}'" for p in executable)
        issues.add(executable[1], f"The file has {len(executable)} executable processes ({names}); "
                                  f'Baton runs one process per file: mark the others isExecutable="false".')
        return None, executable
    chosen = executable[0]
    if not chosen.get("id"):
        issues.add(chosen, "The process has no id.")
        return None, executable
    return chosen, executable


def check_start_events(process: etree._Element, issues: Issues) -> None:
    if not any(local_name(child) == "startEvent" for child in bpmn_children(process)):
        issues.add(process, "The process has no start event.")
