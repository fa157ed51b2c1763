"""The log format: plain text for a person at a terminal (the default), or one JSON object per line
for a log collector (``BATON_LOG_FORMAT=json``), with the tenant, instance, job and request ids
known where the line was written (``engine.telemetry.context``)."""
from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

from engine.telemetry import context

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", <ids>, "exception"}``, one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
                .replace("+00:00", "Z"),
                "level": record.levelname, "logger": record.name, "message": record.getMessage(),
                **context.current()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _Handler(logging.StreamHandler):
    """Baton's own handler on the root logger (replaced, never doubled, when configured again)."""


def configure(level: str | int = "WARNING", log_format: str = "text") -> None:
    """One handler on the root logger, writing to stderr in ``log_format``."""
    if log_format not in FORMATS:
        raise ValueError(f"BATON_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {log_format!r}.")
    root = logging.getLogger()
    handler = _Handler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    if not root.handlers:  # a handler someone else installed (pytest's, gunicorn's) stays in charge
        root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
