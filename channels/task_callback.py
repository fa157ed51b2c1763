"""``POST /tasks/{task_id}/callback``: an external CRM completes a headless user task.

The credential is the task's callback token (``X-Callback-Token``), sent once in its
``task.created`` event; no API key. The body is ``{"result": {...}}`` (``result`` optional, as in
``task.complete``), or ``{"bpmn_error": {"error_code", "message"?, "variables"?}}`` to end the task
with a BPMN error, as ``task.bpmn_error`` does. Answers: 200 ``{"task_id", "status", "instance_id"}``;
unknown task 404; missing or wrong token 401; task not in progress (or its instance not running)
409; a body or result that breaks the rules of ``task.complete`` (or an error no boundary event
of the task catches) 400, naming the field. The token is checked before the body is read.
"""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request

from channels.http import parse_json_object, unit_of_work
from engine import task_throws, tasks
from engine.errors import BadRequestError, NotFoundError
from engine.store.unit_of_work import Actor

bp = Blueprint("task_callback", __name__)

_MAX_TASK_ID = 2**63 - 1
_FIELDS = {"result", "bpmn_error"}
_ERROR_FIELDS = {"error_code": str, "message": str, "variables": dict}


def _body() -> dict:
    mimetype = request.mimetype
    if mimetype and mimetype != "application/json" and not mimetype.endswith("+json"):
        raise BadRequestError(f"Unsupported Content-Type '{mimetype}': send application/json.")
    data = request.get_data(cache=False)
    return parse_json_object(data) if data.strip() else {}


@bp.post("/tasks/<int:task_id>/callback")
def callback(task_id: int):
    if task_id > _MAX_TASK_ID:
        raise NotFoundError(f"Task {task_id} not found.")
    with unit_of_work("task_callback", Actor("webhook", f"task {task_id} callback")) as uow:
        task = tasks.authorize_callback(uow, task_id, request.headers.get("X-Callback-Token"))
        body = _body()
        for name in body:
            if name not in _FIELDS:
                raise BadRequestError(f"The field '{name}' is not allowed; send {{\"result\": {{...}}}}.",
                                      data={"field": name})
        if "bpmn_error" in body:
            if "result" in body:
                raise BadRequestError("Send either 'result' or 'bpmn_error', not both.", data={"field": "bpmn_error"})
            error = _bpmn_error(body["bpmn_error"])
            answer = task_throws.throw_at(uow, task, task_throws.ERROR, error["error_code"], error.get("message"),
                                          error.get("variables") or {}, current_app.extensions["baton"].specs)
            return jsonify(answer)
        result = body.get("result")
        if result is not None and not isinstance(result, dict):
            raise BadRequestError("The field 'result' must be an object.", data={"field": "result"})
        answer = tasks.complete_by_callback(uow, task, result)
    return jsonify(answer)


def _bpmn_error(error) -> dict:
    """``{"error_code": "...", "message"?: "...", "variables"?: {...}}``, or BadRequestError naming the field."""
    if not isinstance(error, dict):
        raise BadRequestError("The field 'bpmn_error' must be an object {error_code, message?, variables?}.",
                              data={"field": "bpmn_error"})
    for name, value in error.items():
        kind = _ERROR_FIELDS.get(name)
        if kind is None:
            raise BadRequestError(f"The field 'bpmn_error.{name}' is not allowed.", data={"field": f"bpmn_error.{name}"})
        if value is not None and not isinstance(value, kind):
            what = "an object" if kind is dict else "a string"
            raise BadRequestError(f"The field 'bpmn_error.{name}' must be {what}.", data={"field": f"bpmn_error.{name}"})
    code = error.get("error_code")
    if not code or len(code) > 255:
        raise BadRequestError("The field 'bpmn_error.error_code' must be 1 to 255 characters.",
                              data={"field": "bpmn_error.error_code"})
    if len(error.get("message") or "") > 2000:
        raise BadRequestError("The field 'bpmn_error.message' must be at most 2000 characters.",
                              data={"field": "bpmn_error.message"})
    return error
