"""The log format: JSON lines carry the ids of the context they were written in; text stays text."""
from __future__ import annotations

import json
import logging
import sys

import pytest

from engine.telemetry import context, logs


def record(message: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord("baton.test", logging.WARNING, __file__, 1, message, args, exc_info)


def test_a_json_line_has_the_message_and_the_ids_known_where_it_was_written():
    formatter = logs.JsonFormatter()
    with context.bound(tenant_id=3, instance_id=41, job_id=907):
        line = formatter.format(record("instance %s failed: %s", 41, "schön"))
    parsed = json.loads(line)
    assert "\n" not in line
    assert parsed["message"] == "instance 41 failed: schön"
    assert (parsed["level"], parsed["logger"]) == ("WARNING", "baton.test")
    assert (parsed["tenant_id"], parsed["instance_id"], parsed["job_id"]) == (3, 41, 907)
    assert "request_id" not in parsed
    assert parsed["time"].endswith("Z")


def test_ids_are_gone_outside_their_context():
    with context.bound(request_id="abc", job_id=None):
        with context.bound(job_id=12):
            assert context.current() == {"request_id": "abc", "job_id": 12}
        assert context.current() == {"request_id": "abc"}
    assert "request_id" not in context.current()


def test_a_request_forgets_the_tenant_it_learnt():
    """A thread serves many requests: what one learnt must not label the next one's lines."""
    with context.bound(request_id="one", tenant_id=None):
        context.set_ids(tenant_id=7)
        assert context.current()["tenant_id"] == 7
    assert "tenant_id" not in context.current()


def test_an_exception_is_one_field_of_the_same_line():
    try:
        raise ValueError("boom")
    except ValueError:
        line = logs.JsonFormatter().format(record("failed", exc_info=sys.exc_info()))
    parsed = json.loads(line)
    assert "\n" not in line
    assert parsed["exception"].startswith("Traceback") and "ValueError: boom" in parsed["exception"]


def test_configure_installs_one_handler_in_the_chosen_format(monkeypatch):
    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    monkeypatch.setattr(root, "handlers", [])
    try:
        logs.configure("info", "json")
        logs.configure("INFO", "json")  # configured again (another create_app): still one handler
        ours = [h for h in root.handlers if isinstance(h.formatter, logs.JsonFormatter)]
        assert len(root.handlers) == 1 and len(ours) == 1
        assert root.level == logging.INFO
        logs.configure("WARNING", "text")
        assert len(root.handlers) == 1 and not isinstance(root.handlers[0].formatter, logs.JsonFormatter)
    finally:
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def test_an_unknown_format_is_refused_naming_the_variable():
    with pytest.raises(ValueError, match="BATON_LOG_FORMAT must be one of text, json, not 'yaml'"):
        logs.configure("INFO", "yaml")
