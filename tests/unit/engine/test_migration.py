"""engine.migration: the workflow it restores to move is never able to run code."""
from __future__ import annotations

import pytest

from engine.errors import BatonError
from engine.migration import _NO_SCRIPTS


@pytest.mark.parametrize("run", [
    lambda: _NO_SCRIPTS.environment.evaluate("__import__('os').getpid()", {}),   # how correlation values are read
    lambda: _NO_SCRIPTS.environment.execute("import os", {}),
    lambda: _NO_SCRIPTS.evaluate(None, "1 + 1"),
    lambda: _NO_SCRIPTS.execute(None, "x = 1"),
])
def test_the_migrations_script_engine_refuses_every_expression_and_script(run):
    with pytest.raises(BatonError):
        run()
