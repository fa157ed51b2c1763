"""The HTTP server's own answers in Baton's JSON error shape.

``flask serve`` runs waitress. A request waitress cannot parse (a bad request line, a control
character in a header, an invalid Content-Length, a body past its hard limit, a transfer encoding
it does not implement) never reaches Flask: waitress answers it itself, in plain text. Its channel
class names the task that writes that answer; ``JsonErrorChannel`` swaps in one that writes
``{"error": {"code": "<word>", "message": "<sentence>"}}`` with the same status, and closes the
connection as waitress does (what follows a request it could not parse cannot be trusted).
Under gunicorn (production) the same requests are answered by gunicorn's own code, which has no
such hook: docs/operations.md says so.
"""
from __future__ import annotations

import json

from waitress.channel import HTTPChannel
from waitress.task import ErrorTask

_WORDS = {400: "bad_request", 413: "payload_too_large", 431: "headers_too_large", 501: "not_implemented"}


class JsonErrorTask(ErrorTask):
    def execute(self):
        error = self.request.error
        code = int(getattr(error, "code", 500) or 500)
        reason = str(getattr(error, "reason", "Bad Request"))
        detail = str(getattr(error, "body", "") or "").strip()
        message = f"{reason}: {detail}." if detail else f"{reason}."
        body = json.dumps({"error": {"code": _WORDS.get(code, "internal" if code >= 500 else "bad_request"),
                                     "message": message}}).encode()
        self.status = f"{code} {reason}"
        self.response_headers.append(("Content-Type", "application/json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class JsonErrorChannel(HTTPChannel):
    error_task_class = JsonErrorTask
