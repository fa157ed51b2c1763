"""engine/ and bpmn/ are the lower layers: they never import rpc/, channels/ or flask.request.
ai/ (the model providers) is a leaf: it imports none of Baton's other packages, nor Flask or SQLAlchemy."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_PACKAGES = ("rpc", "channels")


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", [alias.name for alias in node.names]))
    return found


def lower_layer_files() -> list[Path]:
    return sorted(p for layer in ("engine", "bpmn") for p in (ROOT / layer).rglob("*.py"))


def test_there_are_lower_layer_files_to_check():
    assert len(lower_layer_files()) >= 10


@pytest.mark.parametrize("path", lower_layer_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_lower_layers_import_no_upper_layer(path):
    for module, names in imports_of(path):
        top = module.split(".")[0]
        assert top not in FORBIDDEN_PACKAGES, f"{path.name} imports {module}"
        assert module != "flask.request" and not (module == "flask" and "request" in names), \
            f"{path.name} imports flask.request"


def ai_files() -> list[Path]:
    return sorted((ROOT / "ai").rglob("*.py"))


def test_there_are_ai_files_to_check():
    assert len(ai_files()) >= 3


@pytest.mark.parametrize("path", ai_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_ai_package_is_a_leaf(path):
    for module, _names in imports_of(path):
        top = module.split(".")[0]
        assert top not in ("engine", "bpmn", "rpc", "channels", "flask", "sqlalchemy", "app"), \
            f"{path.name} imports {module}"
