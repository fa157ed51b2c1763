"""The layers hold: engine/'s map (``engine.LAYERS``, drawn in engine/__init__.py and the README)
is what every module imports, engine/ and bpmn/ never import an upper layer, and ai/ is a leaf."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).resolve().parents[2]
UPPER = ("rpc", "channels", "console", "app", "cli")


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in a file, relative imports resolved."""
    found = []
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1]) if path.is_relative_to(ROOT) else ""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            found.append((module, [alias.name for alias in node.names]))
    return found


def engine_parts_imported(path: Path) -> set[str]:
    """The parts of engine/ a file imports: a sub-package, or a top-level module's name."""
    parts = set()
    for module, names in imports_of(path):
        if module == "engine":
            parts.update(names)
        elif module.startswith("engine."):
            parts.add(module.split(".")[1])
    return parts


def files(*packages: str) -> list[Path]:
    return sorted(p for package in packages for p in (ROOT / package).rglob("*.py"))


def label(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_engine_sub_package_is_on_the_map():
    on_disk = {p.name for p in (ROOT / "engine").iterdir() if (p / "__init__.py").exists()}
    assert on_disk == set(engine.LAYERS)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for package in engine.LAYERS:
        assert f"{package}/ " in engine.__doc__, f"engine/{package}/ is not drawn in engine/__init__.py"
        assert f"`engine/{package}/`" in readme, f"engine/{package}/ is not in the README's layout table"


def check_map(path: Path, own: str) -> None:
    allowed = {own, *engine.LAYERS[own]}
    imported = engine_parts_imported(path)
    assert imported <= allowed, f"{path.name} may import only {sorted(allowed)} of engine/, not {sorted(imported - allowed)}"


@pytest.mark.parametrize("path", [p for p in files("engine") if p.parent != ROOT / "engine"], ids=label)
def test_each_engine_sub_package_imports_only_what_the_map_allows(path):
    check_map(path, path.relative_to(ROOT / "engine").parts[0])


@pytest.mark.parametrize("path", files("engine", "bpmn"), ids=label)
def test_lower_layers_import_no_upper_layer(path):
    for module, names in imports_of(path):
        assert module.split(".")[0] not in UPPER, f"{label(path)} imports {module}"
        assert module != "flask.request" and not (module == "flask" and "request" in names), \
            f"{label(path)} imports flask.request"


@pytest.mark.parametrize("path", [p for p in files("engine") if "store" not in p.relative_to(ROOT).parts],
                         ids=label)
def test_only_the_store_touches_flask(path):
    for module, _names in imports_of(path):
        assert module.split(".")[0] not in ("flask", "flask_sqlalchemy"), f"{label(path)} imports {module}"


@pytest.mark.parametrize("path", files("bpmn"), ids=label)
def test_bpmn_imports_only_the_errors_and_the_sandbox_of_the_engine(path):
    assert engine_parts_imported(path) <= {"errors", "sandbox"}


@pytest.mark.parametrize("path", files("ai"), ids=label)
def test_the_ai_package_is_a_leaf(path):
    for module, _names in imports_of(path):
        top = module.split(".")[0]
        assert top not in ("engine", "bpmn", "rpc", "channels", "flask", "sqlalchemy", "app", "cli"), \
            f"{label(path)} imports {module}"


def test_a_planted_wrong_import_is_caught(tmp_path):
    """The map's check fails on a store module that imports the runner (and on relative imports)."""
    planted = tmp_path / "planted.py"
    planted.write_text("from engine.runtime.runner import Runner\nfrom engine import jobs\n", encoding="utf-8")
    with pytest.raises(AssertionError, match=r"may import only \['errors', 'json_values', 'store', 'telemetry'\] of engine/, not \['jobs', 'runtime'\]"):
        check_map(planted, "store")
