"""The BPMN MIWG reference models: each is accepted or refused with a proper list, never a crash.

The files (tests/corpus, CC BY 3.0, see its LICENSE.txt) are mostly descriptive models; many
processes are marked not executable, so each file is also tried with every process marked
executable, which walks the element checks over much more of BPMN (subprocesses included, now
that their content is checked like a process's).

Measured after external tasks, message throws, JUEL/FEEL and ioSpecification became deployable
(issue 14): as is 1 of 21 accepted (C.9.1, a Camunda-made model of external send tasks, a receive
task and boundary timers), all executable 2 of 21 (and A.1.0). The models stay refused for reasons
of their own, most often exclusive gateways with unconditioned non-default flows, ioSpecification
data inputs and outputs whose ids are not variable names, potentialOwner on user tasks, and message
events without a messageRef.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from bpmn import deploy
from engine.errors import BpmnValidationError

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
FILES = sorted(CORPUS.glob("*.bpmn"))
VARIANTS = ("as_is", "all_executable")


def variant_of(path: Path, variant: str) -> bytes:
    data = path.read_bytes()
    if variant == "all_executable":
        return data.replace(b'isExecutable="false"', b'isExecutable="true"')
    return data


def outcome(data: bytes) -> list[dict] | None:
    """None if accepted, else the refusal's errors; any other exception fails the test."""
    try:
        deploy.parse_definition(data)
    except BpmnValidationError as refused:
        return refused.errors
    return None


def test_the_corpus_is_there():
    assert len(FILES) == 21


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_corpus_file_is_accepted_or_refused_with_located_reasons(path, variant):
    errors = outcome(variant_of(path, variant))
    if errors is None:
        return
    assert errors
    for error in errors:
        assert set(error) == {"element_id", "line", "message"}
        assert error["element_id"] is None or isinstance(error["element_id"], str)
        assert error["line"] is None or (isinstance(error["line"], int) and error["line"] > 0)
        assert isinstance(error["message"], str) and error["message"].endswith(".")
        assert "internal error" not in error["message"]
        assert "SpiffWorkflow cannot parse" not in error["message"]  # Baton's own sentence first


def test_corpus_summary(record_property):
    """Counts for the record (shown with -s or in the junit XML)."""
    summary = {}
    for variant in VARIANTS:
        accepted, reasons = 0, Counter()
        for path in FILES:
            errors = outcome(variant_of(path, variant))
            accepted += errors is None
            reasons.update(re.sub(r"'[^']*'", "'…'", e["message"]) for e in errors or [])
        summary[variant] = {"accepted": accepted, "refused": len(FILES) - accepted,
                            "top_reasons": reasons.most_common(8)}
        record_property(f"corpus_{variant}", summary[variant])
        print(f"\ncorpus {variant}: {accepted} accepted, {len(FILES) - accepted} refused")
        for reason, count in summary[variant]["top_reasons"]:
            print(f"  {count:3d}  {reason}")
    assert summary["as_is"]["accepted"] == 1  # C.9.1
    assert summary["all_executable"]["accepted"] == 2  # and A.1.0, a plain sequence of tasks
