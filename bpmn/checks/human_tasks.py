"""Deploy checks of user and manual tasks: assignment, due dates and priority that can be
evaluated (``bpmn.assignment``), and a Camunda Form reference the deploy can serve (``bpmn.camunda_forms``)."""
from __future__ import annotations

from lxml import etree

from bpmn.assignment import read_assignment
from bpmn.camunda_forms import form_ref, form_ref_problem
from bpmn.issues import Issues, local_name

HUMAN_TASKS = ("userTask", "manualTask")


def check_human_task(element: etree._Element, forms: dict[str, dict], deployed: dict[str, set[int]],
                     issues: Issues) -> None:
    """``forms``: the deploy's forms by id; ``deployed``: the tenant's earlier ones (id -> versions)."""
    tag = local_name(element)
    _settings, problems = read_assignment(element)
    for problem in problems:
        issues.add(element, f"{tag} {problem}.")
    ref = form_ref(element)
    if ref is not None:
        problem = form_ref_problem(ref, forms, deployed)
        if problem:
            issues.add(element, f"{tag} camunda:formRef {problem}.")
