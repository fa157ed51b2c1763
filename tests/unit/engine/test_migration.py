"""engine.migration: the workflow it restores to move is never able to run code."""
from __future__ import annotations

import pytest

from engine.errors import BatonError
from engine.migration import NOTHING_RUNS


@pytest.mark.parametrize("run", [
    lambda: NOTHING_RUNS.environment.evaluate("__import__('os').getpid()", {}),   # how correlation values are read
    lambda: NOTHING_RUNS.environment.execute("import os", {}),
    lambda: NOTHING_RUNS.evaluate(None, "1 + 1"),
    lambda: NOTHING_RUNS.execute(None, "x = 1"),
])
def test_the_migrations_script_engine_refuses_every_expression_and_script(run):
    with pytest.raises(BatonError):
        run()
