"""The one error tree of Baton.

Every error a caller can see is a subclass of BatonError. Each class carries its JSON-RPC code,
its ``data.reason`` word and its HTTP status; its docstring is its default message. Errors are
translated to the wire in exactly two places: the JSON-RPC adapter (``rpc/endpoint.py``) and the
Flask error handlers (``channels/http.py``).

    BatonError (internal, -32603, 500)
    ├── ParseError            -32700 parse_error       400
    ├── InvalidRequestError   -32600 invalid_request   400
    ├── MethodNotFoundError   -32601 method_not_found  404
    ├── InvalidParamsError    -32602 invalid_params    400
    │   ├── BpmnValidationError   (data.errors: [{element_id, line, message}])
    │   ├── BadRequestError       bad_request: a malformed HTTP body or header (400)
    │   └── OutboundRefusedError  outbound_refused: an outbound URL the SSRF guard refuses (400)
    ├── NotFoundError         -32602 not_found         404
    ├── ConflictError         -32602 conflict          409
    ├── UnauthorizedError     -32603 unauthorized      401
    ├── ForbiddenError        -32603 forbidden         403  (data.permission)
    ├── PayloadTooLargeError  -32600 payload_too_large 413
    ├── MethodNotAllowedError -32600 method_not_allowed 405 (GET on the JSON-RPC endpoint, ...)
    ├── TooManyRequestsError  -32603 too_many_requests 429  a rate limit (data.retry_after_s; header Retry-After)
    ├── HttpStatusError       -32600 (its own word)    (its status)  what the web layer refuses by itself
    ├── CallActivityError     a call activity names a process that is not deployed (fails its instance)
    ├── OperatorError         an operator service task failed, e.g. HTTP after its retries (fails its instance)
    ├── ExternalTaskError     a worker failed an external task for good, or a BPMN error thrown at a task found no catcher (fails its instance)
    ├── ScriptError           a sandboxed script/condition/template failed (fails its instance)
    │   ├── SandboxLimitError     it broke the time or memory limit
    │   └── GuardrailError        the instance grew past a safety limit (steps, depth, time)
    └── OutboundError         -32603 outbound_failed   502  an outbound HTTP call failed (connect, timeout, size)
        ├── CallFailedError       an HTTP task's call failed: retryable or not, with the server's Retry-After
        └── MessengerUnavailableError  messenger_unavailable: Telegram/Viber/WhatsApp could not be reached

Errors that fail an instance (CallActivityError, OperatorError, ExternalTaskError, ScriptError)
never reach a caller
as such: the instance's ``error`` carries their message. The wire forms are ``to_rpc()`` (the
``error`` object of a JSON-RPC answer) and ``to_http()`` (status and body of any other endpoint);
``http_headers()`` are the headers an answer carrying the error adds (``Retry-After``), on every path.
"""
from __future__ import annotations

from typing import Any


class BatonError(Exception):
    """Internal error."""

    rpc_code = -32603
    reason = "internal"
    http_status = 500

    def __init__(self, message: str | None = None, *, data: dict[str, Any] | None = None):
        self.message = message or (self.__doc__ or "").strip()
        self.data = dict(data or {})
        super().__init__(self.message)

    def rpc_data(self) -> dict[str, Any]:
        """The ``error.data`` object of a JSON-RPC answer."""
        return {"reason": self.reason, **self.data}

    def to_rpc(self) -> dict[str, Any]:
        """The ``error`` object of a JSON-RPC answer: code, message and ``data.reason`` (+ details)."""
        return {"code": self.rpc_code, "message": self.message, "data": self.rpc_data()}

    def to_http(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body of any endpoint but JSON-RPC:
        ``{"error": {"code": "<reason>", "message": "<sentence>"}}`` (plus ``errors`` for a BPMN refusal)."""
        body: dict[str, Any] = {"code": self.reason, "message": self.message}
        if "errors" in self.data:
            body["errors"] = self.data["errors"]
        return self.http_status, {"error": body}

    def http_headers(self) -> dict[str, str]:
        """Headers an HTTP answer carrying this error adds, whichever shape its body has."""
        return {}


class ParseError(BatonError):
    """The body is not valid JSON."""

    rpc_code = -32700
    reason = "parse_error"
    http_status = 400


class InvalidRequestError(BatonError):
    """The body is not a valid JSON-RPC 2.0 request."""

    rpc_code = -32600
    reason = "invalid_request"
    http_status = 400


class MethodNotFoundError(BatonError):
    """Method not found."""

    rpc_code = -32601
    reason = "method_not_found"
    http_status = 404


class InvalidParamsError(BatonError):
    """Invalid params."""

    rpc_code = -32602
    reason = "invalid_params"
    http_status = 400


class BpmnValidationError(InvalidParamsError):
    """The BPMN file cannot be deployed."""

    def __init__(self, errors: list[dict[str, Any]], message: str | None = None):
        self.errors = errors
        if message is None:
            first = errors[0]["message"] if errors else ""
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            message = f"The BPMN file cannot be deployed: {first}{more}"
        super().__init__(message, data={"errors": errors})


class BadRequestError(InvalidParamsError):
    """The request is malformed."""

    reason = "bad_request"


class NotFoundError(BatonError):
    """Not found."""

    rpc_code = -32602
    reason = "not_found"
    http_status = 404


class ConflictError(BatonError):
    """The object is in a state that forbids this."""

    rpc_code = -32602
    reason = "conflict"
    http_status = 409


class UnauthorizedError(BatonError):
    """A valid API key is required."""

    rpc_code = -32603
    reason = "unauthorized"
    http_status = 401


class MetricsTokenError(UnauthorizedError):
    """/metrics needs the metrics token: send it as "Authorization: Bearer <BATON_METRICS_TOKEN>"."""

    def http_headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer realm="metrics"'}


class ForbiddenError(BatonError):
    """The API key lacks the permission for this."""

    rpc_code = -32603
    reason = "forbidden"
    http_status = 403

    def __init__(self, permission: str, message: str | None = None):
        super().__init__(message or f"The API key lacks the permission '{permission}'.",
                         data={"permission": permission})


class PayloadTooLargeError(BatonError):
    """The request body is too large."""

    rpc_code = -32600
    reason = "payload_too_large"
    http_status = 413


class MethodNotAllowedError(BatonError):
    """This HTTP method is not allowed here."""

    rpc_code = -32600
    reason = "method_not_allowed"
    http_status = 405

    def __init__(self, allowed: tuple[str, ...], message: str | None = None):
        super().__init__(message or f"Use {' or '.join(allowed)}.", data={"allowed": list(allowed)})
        self.allowed = allowed


class TooManyRequestsError(BatonError):
    """Too many requests: slow down."""

    rpc_code = -32603
    reason = "too_many_requests"
    http_status = 429

    def __init__(self, limit: str, retry_after_s: int):
        self.limit, self.retry_after_s = limit, max(1, int(retry_after_s))
        super().__init__(f"Too many requests for this {limit}; try again in {self.retry_after_s} s.",
                         data={"retry_after_s": self.retry_after_s})

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class HttpStatusError(BatonError):
    """The request was refused."""

    rpc_code = -32600

    def __init__(self, status: int, reason: str, message: str | None = None):
        super().__init__(message)
        self.http_status, self.reason = status, reason


class CallActivityError(BatonError):
    """A call activity names a process that is not deployed."""

    reason = "call_activity"


class OperatorError(BatonError):
    """An operator service task failed (an HTTP call answered an error after its retries, ...)."""

    reason = "operator_failed"


class ExternalTaskError(BatonError):
    """An external task failed: its worker reported a failure with no retries left, or a BPMN error
    that no error boundary event catches."""

    reason = "external_task_failed"


class ScriptError(BatonError):
    """A script, condition or template failed."""

    reason = "script_error"


class SandboxLimitError(ScriptError):
    """A script broke the sandbox's time or memory limit."""

    reason = "sandbox_limit"


class GuardrailError(ScriptError):
    """The instance grew past a safety limit and was stopped."""

    reason = "guardrail"


class OutboundRefusedError(InvalidParamsError):
    """The outbound URL is not allowed."""

    reason = "outbound_refused"


class OutboundError(BatonError):
    """The outbound HTTP call failed."""

    reason = "outbound_failed"
    http_status = 502


class CallFailedError(OutboundError):
    """An HTTP task's call failed (a refused URL, no answer, or a status other than 2xx)."""

    reason = "call_failed"

    def __init__(self, message: str, *, retryable: bool, retry_after_s: float | None = None,
                 status: int | None = None):
        super().__init__(message)
        self.retryable, self.retry_after_s, self.status = retryable, retry_after_s, status


class MessengerUnavailableError(OutboundError):
    """The messenger could not be reached; nothing was changed. Try again later."""

    reason = "messenger_unavailable"
