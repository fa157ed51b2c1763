"""Only the owners of units of work end them (``engine.store.unit_of_work``): the JSON-RPC endpoint,
the HTTP doors, the worker, the command line, and the app factory's start of the workers. Every
other module of Baton receives a unit of work and never commits, rolls back or begins one; nothing
uses the ambient ``db.session`` to end a transaction."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["app.py", "cli.py", "engine", "rpc", "channels", "bpmn", "ai"]
# Who may begin, commit and roll back units of work, and why.
OWNERS = {
    "rpc/endpoint.py": "one unit of work per JSON-RPC call",
    "channels/http.py": "the doors' unit of work (unit_of_work), /readyz",
    "channels/webhook.py": "the webhook door (both of its doors)",
    "channels/messengers.py": "one unit of work per item of a messenger's call",
    "engine/jobs/worker.py": "the claim, each job and its steps, a batch, a release",
    "cli.py": "each command",
    "app.py": "scheduling retention when the workers start",
    # The mechanism itself.
    "engine/store/unit_of_work.py": "the unit of work",
    "engine/store/driver.py": "a transaction on the DBAPI connection",
}
ENDING = {"commit", "rollback"}
BEGINNING = {"begin", "new"}


def _modules():
    for source in SOURCES:
        path = ROOT / source
        for file in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            yield file.relative_to(ROOT).as_posix(), ast.parse(file.read_text(encoding="utf-8"))


def _calls(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node, node.func.attr, ast.unparse(node.func.value)


def ending_or_beginning(tree) -> list[str]:
    """The calls in ``tree`` that end a transaction or begin a unit of work, as source text."""
    found = []
    for node, name, owner in _calls(tree):
        if name in ENDING and not node.args:
            found.append(ast.unparse(node))
        elif name in BEGINNING and owner.split(".")[-1] == "units":
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("module, tree", list(_modules()), ids=lambda value: value if isinstance(value, str) else "")
def test_only_owners_end_or_begin_a_unit_of_work(module, tree):
    if module in OWNERS:
        return
    assert ending_or_beginning(tree) == [], (
        f"{module} ends or begins a transaction itself; a use case receives a unit of work and its "
        "owner (the door or the worker) commits it (engine/store/unit_of_work.py)")


def test_no_module_ends_a_transaction_on_the_ambient_session():
    for module, tree in _modules():
        for node, name, owner in _calls(tree):
            assert not (name in ENDING and owner == "db.session"), f"{module}: {ast.unparse(node)}"


def test_the_check_finds_a_planted_commit_in_a_use_case():
    planted = ast.parse("def complete(uow, task):\n    uow.execute(task)\n    uow.commit()\n")
    assert ending_or_beginning(planted) == ["uow.commit()"]
    planted = ast.parse("def complete(units):\n    with units.begin('x') as uow:\n        pass\n")
    assert ending_or_beginning(planted) == ["units.begin('x')"]
