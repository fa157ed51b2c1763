"""``POST /tasks/{task_id}/callback``: an external CRM completes a headless user task.

The credential is the task's callback token (``X-Callback-Token``), sent once in its
``task.created`` event; no API key. The body is ``{"result": {...}}`` (``result`` optional, as in
``task.complete``). Answers: 200 ``{"task_id", "status": "completed", "instance_id"}``; unknown task
404; missing or wrong token 401; task not in progress (or its instance not running) 409; a body or
result that breaks the rules of ``task.complete`` 400, naming the field. The token is checked
before the body is read.
"""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from channels.http import parse_json_object, unit_of_work
from engine import tasks
from engine.errors import BadRequestError, NotFoundError
from engine.store.unit_of_work import Actor

bp = Blueprint("task_callback", __name__)

_MAX_TASK_ID = 2**63 - 1
_FIELDS = {"result"}


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
        result = body.get("result")
        if result is not None and not isinstance(result, dict):
            raise BadRequestError("The field 'result' must be an object.", data={"field": "result"})
        answer = tasks.complete_by_callback(uow, task, result)
    return jsonify(answer)
