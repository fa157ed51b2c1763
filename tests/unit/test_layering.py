"""The layers hold: every module reaches, directly or through the modules it imports, only what its
row of ``engine.LAYERS`` allows, and the README's layout table draws that same map."""
from __future__ import annotations

import ast
import functools
from collections import deque
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).resolve().parents[2]
NOT_BATON = ("tests", "migrations", "bench", "docs")  # top-level folders that are no layer of the service


@functools.cache
def modules_under(root: Path) -> dict[str, Path]:
    """Every module of the tree at ``root`` by dotted name: top-level ``*.py`` files and packages."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[0] in NOT_BATON or parts[0].startswith("."):
            continue
        packages = [root.joinpath(*parts[:i]) for i in range(1, len(parts))]
        if not all((package / "__init__.py").exists() for package in packages):
            continue  # a script in a folder that is no package
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """The Baton modules that running ``name`` loads through its own import statements (at the top
    or inside functions), as (module, named): a module it names is reached; a package loaded only on
    the way to one of its modules (``import a.b`` runs ``a/__init__``) is passed through: what that
    ``__init__`` imports is reached, the package itself is not."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: list[tuple[str, bool]] = []

    def add(module: str) -> None:
        parts = module.split(".")
        targets.extend((".".join(parts[:i]), False) for i in range(1, len(parts)) if ".".join(parts[:i]) in known)
        if module in known:
            targets.append((module, True))

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return targets


def layer_of(module: str, layers: dict) -> str:
    """The longest key of the map that is the module or a package above it."""
    candidates = [key for key in layers if module == key or module.startswith(key + ".")]
    assert candidates, f"{module} is on no row of the map"
    return max(candidates, key=len)


def may_reach(layer: str, other: str, layers: dict) -> bool:
    """A layer reaches itself, its parts, and what its row names (a name covers the parts under it)."""
    return any(other == allowed or other.startswith(allowed + ".") or allowed == "*"
               for allowed in (layer, *layers[layer]))


def violations(root: Path, layers: dict) -> dict[str, list[str]]:
    """For every module of the tree that reaches a layer its row does not allow: one chain per
    forbidden layer, ``a -> b -> c``, shortest first found (breadth first)."""
    modules = modules_under(root)
    graph = {name: imports_of(name, path, set(modules)) for name, path in modules.items()}
    found: dict[str, list[str]] = {}
    for start in modules:
        own = layer_of(start, layers)
        chains = {start: (start,)}
        reported: set[str] = set()
        queue = deque([start])
        while queue:
            module = queue.popleft()
            for target, named in graph[module]:
                chain = (*chains[module], target)
                reached = layer_of(target, layers)
                if named and reached not in reported and not may_reach(own, reached, layers):
                    reported.add(reached)
                    found.setdefault(start, []).append(" -> ".join(chain))
                if target not in chains:
                    chains[target] = chain
                    queue.append(target)
    return found


@functools.cache
def baton_violations() -> dict[str, list[str]]:
    return violations(ROOT, engine.LAYERS)


@pytest.mark.parametrize("module", sorted(modules_under(ROOT)))
def test_each_module_reaches_only_what_its_row_allows(module):
    chains = baton_violations().get(module, [])
    assert not chains, f"{module} ({layer_of(module, engine.LAYERS)}) reaches outside its row:\n" + "\n".join(chains)


def test_every_top_level_package_and_part_of_the_engine_is_a_row_and_every_row_exists():
    modules = modules_under(ROOT)
    packages = {name for name, path in modules.items()
                if name.count(".") == 0 or (name.startswith("engine.") and path.name == "__init__.py"
                                            and name.count(".") == 1)}
    assert packages <= set(engine.LAYERS), f"not on the map: {sorted(packages - set(engine.LAYERS))}"
    assert set(engine.LAYERS) <= set(modules), f"no such module: {sorted(set(engine.LAYERS) - set(modules))}"


def test_every_name_on_a_row_is_a_layer():
    for layer, row in engine.LAYERS.items():
        assert set(row) <= {*engine.LAYERS, "*"}, f"{layer}'s row names {sorted(set(row) - set(engine.LAYERS))}"


def readme_rows() -> dict[str, set[str]]:
    """The layout table's "may reach" column, by layer: a bare name is a part of engine/, a
    backticked path a package or module; "everything" and "nothing of Baton" as they say."""
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`") or not cells[2]:
            continue
        layer = cells[0].strip("`").removesuffix("/").removesuffix(".py").replace("/", ".")
        items = set()
        for item in (part.strip() for part in cells[2].split(",")):
            if item == "everything":
                items.add("*")
            elif item not in ("nothing of Baton", "its parts"):
                path = item.strip("`")
                items.add(path.removesuffix("/").removesuffix(".py").replace("/", ".") if item.startswith("`")
                          else f"engine.{path}")
        rows[layer] = items
    return rows


def test_the_readme_layout_table_draws_the_map():
    rows = readme_rows()
    assert set(rows) == set(engine.LAYERS), "the README's layout table and engine.LAYERS list different layers"
    for layer, row in engine.LAYERS.items():
        assert rows[layer] == set(row), f"README's row of {layer} says {sorted(rows[layer])}, the map {sorted(row)}"


def statements_of(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import statement of a file, any library's."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.module or "", [alias.name for alias in node.names]))
    return found


def files_of(*packages: str) -> list[Path]:
    return [path for path in modules_under(ROOT).values() if path.relative_to(ROOT).parts[0] in packages]


def label(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", files_of("engine", "bpmn"), ids=label)
def test_the_engine_and_bpmn_never_import_the_request(path):
    for module, names in statements_of(path):
        assert module != "flask.request" and not (module == "flask" and "request" in names), \
            f"{label(path)} imports flask.request"


@pytest.mark.parametrize("path", [p for p in files_of("engine") if "store" not in p.relative_to(ROOT).parts],
                         ids=label)
def test_only_the_store_touches_flask(path):
    for module, _names in statements_of(path):
        assert module.split(".")[0] not in ("flask", "flask_sqlalchemy"), f"{label(path)} imports {module}"


@pytest.mark.parametrize("path", files_of("ai"), ids=label)
def test_the_ai_package_imports_no_web_or_database_library(path):
    for module, _names in statements_of(path):
        assert module.split(".")[0] not in ("flask", "sqlalchemy"), f"{label(path)} imports {module}"


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_a_planted_transitive_import_is_caught_with_its_chain(tmp_path):
    """low may reach mid and mid may reach high, but low may not reach high: low.a imports mid.b,
    whose function imports high.c lazily."""
    plant(tmp_path, {"low/__init__.py": "", "low/a.py": "from mid import b\n",
                     "mid/__init__.py": "", "mid/b.py": "def f():\n    from high.c import X\n",
                     "high/__init__.py": "", "high/c.py": "X = 1\n"})
    layers = {"low": ("mid",), "mid": ("high",), "high": ()}
    assert violations(tmp_path, layers) == {"low.a": ["low.a -> mid.b -> high.c"]}


def test_a_package_init_that_loads_a_forbidden_layer_is_caught_through_it(tmp_path):
    """``from mid.light import f`` runs mid/__init__, which re-exports mid.heavy, which imports
    high: low reaches high through the package it passed through (relative imports resolved)."""
    plant(tmp_path, {"low/__init__.py": "", "low/a.py": "from mid.light import f\n",
                     "mid/__init__.py": "from .heavy import g\n", "mid/light.py": "def f(): pass\n",
                     "mid/heavy.py": "import high.c\ndef g(): pass\n",
                     "high/__init__.py": "", "high/c.py": ""})
    layers = {"low": ("mid",), "mid": ("high",), "high": ()}
    assert violations(tmp_path, layers) == {"low.a": ["low.a -> mid -> mid.heavy -> high.c"]}


def test_a_direct_import_against_the_map_is_caught(tmp_path):
    plant(tmp_path, {"low/__init__.py": "", "low/a.py": "import high\n", "high/__init__.py": ""})
    assert violations(tmp_path, {"low": (), "high": ()}) == {"low.a": ["low.a -> high"]}
