"""The sandbox plugged into SpiffWorkflow 3.2: no ``eval``/``exec`` with real builtins ever runs."""
from __future__ import annotations

import time
from collections import ChainMap

from SpiffWorkflow.bpmn.exceptions import WorkflowTaskException
from SpiffWorkflow.bpmn.script_engine.python_engine import PythonScriptEngine
from SpiffWorkflow.bpmn.script_engine.python_environment import BasePythonScriptEngineEnvironment

from engine.errors import ScriptError
from engine.sandbox import inline_scripts
from engine.sandbox.expressions import check_expression
from engine.sandbox.host import script_problem
from engine.sandbox.scripts import Sandbox
from engine.telemetry import metrics


class _SandboxEnvironment(BasePythonScriptEngineEnvironment):
    """SpiffWorkflow calls the environment directly in some places (process completion
    conditions, message correlations), so the sandbox is plugged in here, not only in the engine."""

    def __init__(self, sandbox: Sandbox, tenant=None) -> None:
        super().__init__({})
        self.sandbox = sandbox
        self.tenant = tenant

    def evaluate(self, expression, context, external_context=None):
        names = ChainMap(context, external_context) if external_context else context
        return self.sandbox.evaluate(expression, names)

    def execute(self, script, context, external_context=None):
        variables = {**external_context, **context} if external_context else context
        # A script of assignments runs here, as a host would run it; any other goes to a host.
        started = time.perf_counter()
        result = None if script_problem(script)[0] else inline_scripts.run(script, variables)
        if result is None:
            result = self.sandbox.execute(script, variables, tenant=self.tenant)
        else:
            metrics.SCRIPT_SECONDS.labels("ok").observe(time.perf_counter() - started)
        for key in external_context or ():  # data objects live in the workflow, not the task
            if key not in context:
                result.pop(key, None)
        context.clear()  # replace, so that `del x` in the script removes x
        context.update(result)
        return True

    def call_service(self, context, **kwargs):
        raise ScriptError("service tasks are not run by the script engine")


class SandboxScriptEngine(PythonScriptEngine):
    """SpiffWorkflow's script engine, backed by a Sandbox.

    How a caller finds our error: SpiffWorkflow raises ``WorkflowTaskException`` from
    ``workflow.do_engine_steps()``/``task.run()``; the ``ScriptError`` (or ``SandboxLimitError``)
    is its ``exception`` attribute and also its ``__cause__``. Some SpiffWorkflow paths call the
    environment directly and let the ``ScriptError`` itself propagate. ``script_error_of(exc)``
    handles every case and returns the ScriptError or None.

    A script runs in a host of the engine's tenant: the engine that runs an instance is
    ``for_tenant(instance's tenant)`` (one per tenant, kept), so that the sandbox never hands a
    host of one tenant to another's script.
    """

    def __init__(self, sandbox: Sandbox, tenant=None) -> None:
        super().__init__(environment=_SandboxEnvironment(sandbox, tenant))
        self.sandbox = sandbox
        self.tenant = tenant
        self._by_tenant: dict = {} if tenant is None else None

    def for_tenant(self, tenant) -> "SandboxScriptEngine":
        """The engine whose scripts run in hosts of ``tenant`` (built once per tenant)."""
        if tenant == self.tenant:
            return self
        if self._by_tenant is None:
            raise ValueError("a tenant's script engine serves that tenant only")
        engine = self._by_tenant.get(tenant)
        if engine is None:
            engine = self._by_tenant.setdefault(tenant, SandboxScriptEngine(self.sandbox, tenant))
        return engine

    def validate(self, expression):
        problem = check_expression(expression)
        if problem:
            raise ScriptError(problem)

    def evaluate(self, task, expression, external_context=None):
        try:
            return self.environment.evaluate(expression, task.data, external_context)
        except ScriptError as exc:
            raise _wrapped(WorkflowTaskException(
                f"Error evaluating expression '{expression}': {exc.message}", task=task,
                exception=exc), exc) from exc

    def execute(self, task, script, external_context=None):
        try:
            return self.environment.execute(script, task.data, external_context)
        except ScriptError as exc:
            line = exc.data.get("line")
            lines = script.splitlines()
            error_line = lines[line - 1] if line and 0 < line <= len(lines) else ""
            raise _wrapped(WorkflowTaskException(
                exc.message, task=task, exception=exc, line_number=line,
                error_line=error_line), exc) from exc

    def call_service(self, task, **kwargs):
        raise WorkflowTaskException("service tasks are not run by the script engine", task=task)


def _wrapped(wrapper: WorkflowTaskException, error: ScriptError) -> WorkflowTaskException:
    wrapper.exception = error  # SpiffWorkflow only keeps the class name; keep the error itself
    return wrapper


def script_error_of(exc: BaseException | None) -> ScriptError | None:
    """The ScriptError behind an exception raised while running a workflow, or None."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        if isinstance(current, ScriptError):
            return current
        seen.add(id(current))
        wrapped = getattr(current, "exception", None)
        todo.extend(x for x in (current.__context__, current.__cause__,
                                wrapped if isinstance(wrapped, BaseException) else None) if x)
    return None


class _NoCodeEnvironment(BasePythonScriptEngineEnvironment):
    """Where code that reaches the environment directly (a message's correlation expression,
    ``bpmn.events.correlation_values``) is refused, never evaluated."""

    def evaluate(self, expression, context, external_context=None):
        raise ScriptError("Nothing is evaluated in a workflow restored to be checked or moved.")

    def execute(self, script, context, external_context=None):
        raise ScriptError("No script runs in a workflow restored to be checked or moved.")


class NothingRuns(PythonScriptEngine):
    """The script engine a stored state is restored with to be read, checked (a repair) or moved
    (a migration), never to run: SpiffWorkflow needs an engine to restore, and its default one (and
    its default environment) would run anything with full builtins."""

    def __init__(self) -> None:
        super().__init__(environment=_NoCodeEnvironment())

    def evaluate(self, task, expression, external_context=None):
        raise ScriptError("Nothing is evaluated in a workflow restored to be checked or moved.")

    def execute(self, task, script, external_context=None):
        raise ScriptError("No script runs in a workflow restored to be checked or moved.")


NOTHING_RUNS = NothingRuns()
