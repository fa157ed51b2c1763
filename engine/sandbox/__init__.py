"""Where user code runs: conditions, timer expressions and templates in-process (``expressions``),
script tasks in limited child processes (``scripts`` + ``host``), and the SpiffWorkflow script
engine built on both (``script_engine``). Imports nothing of Baton but ``engine.errors`` and
``engine.telemetry`` (script time)."""
from engine.sandbox.expressions import check_expression, check_script, check_template
from engine.sandbox.script_engine import SandboxScriptEngine, script_error_of
from engine.sandbox.scripts import Sandbox

__all__ = ["Sandbox", "SandboxScriptEngine", "check_expression", "check_script", "check_template",
           "script_error_of"]
