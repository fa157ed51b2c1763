"""What every deploy refusal must look like, for the BPMN parsing tests."""
from __future__ import annotations

import pytest

from bpmn import deploy
from engine.errors import BpmnValidationError


def refusal(source: str | bytes) -> list[dict]:
    """The errors of deploying ``source``, which must be refused: each one names element id, line
    and a message that is a sentence, never an internal error."""
    with pytest.raises(BpmnValidationError) as caught:
        deploy.parse_definition(source)
    errors = caught.value.errors
    assert errors, "a refusal always lists at least one problem"
    for error in errors:
        assert set(error) == {"element_id", "line", "message"}
        assert error["message"].endswith(".")
        assert "internal error" not in error["message"]
    return errors
