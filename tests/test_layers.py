"""The package's layers, as docs/architecture.md draws them: imports point one way.

Every ``import`` in ``ptycho/`` (module level or inside a function, where the heavy ones
live) is read with :mod:`ast`; a module may import its own layer and the layers listed
under it, never one above. A new folder must be placed here to pass.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ptycho"

#: Top-level modules are the foundation everything may use, or the entry point.
CORE = {"__init__", "errors", "config", "runtime", "artifacts"}
ENTRY = {"cli", "__main__"}

#: layer -> the layers it may import (besides itself).
ALLOWED = {
    "core": set(),
    "physics": {"core"},
    "data": {"core", "physics"},
    "nets": {"core", "physics", "data"},
    "analysis": {"core", "physics", "data"},
    "solvers": {"core", "physics", "data", "nets"},  # nets for the XLA modes (nets/xla.py) only
    "tracking": {"core"},
    "study": {"core", "physics", "data", "nets", "analysis", "solvers", "tracking"},
    "entry": {"core", "physics", "data", "nets", "analysis", "solvers", "tracking", "study"},
}


def layer_of(dotted: str) -> str:
    """``ptycho.nets.train`` -> ``nets``; ``ptycho.errors`` -> ``core``; ``ptycho.cli`` -> ``entry``."""
    parts = dotted.split(".")
    assert parts[0] == "ptycho", dotted
    if len(parts) == 1 or parts[1] in CORE:
        return "core"
    if parts[1] in ENTRY:
        return "entry"
    if parts[1] not in ALLOWED:
        raise AssertionError(f"{dotted}: ptycho/{parts[1]} belongs to no layer; place it in tests/test_layers.py")
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 2:
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").exists()


def _type_only(tree: ast.AST) -> set[int]:
    """Ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return found


def imported(path: Path, runtime: bool = False) -> list[tuple[int, str]]:
    """Every ``ptycho`` module ``path`` imports, with its line (``from ptycho import x`` names
    ``ptycho.x``); ``runtime``: not those under ``if TYPE_CHECKING:``."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_only(tree) if runtime else set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "ptycho"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ptycho":
            assert node.level == 0, f"{path}:{node.lineno}: use absolute imports"
            if node.module == "ptycho":  # from ptycho import tracking, __version__
                found += [(node.lineno, f"ptycho.{a.name}" if _is_module(a.name) else "ptycho") for a in node.names]
            else:  # from ptycho.study import report: the module report, else the package
                base = PACKAGE.parent.joinpath(*node.module.split("."))
                subs = [a.name for a in node.names if (base / f"{a.name}.py").exists() or (base / a.name).is_dir()]
                found += [(node.lineno, f"{node.module}.{n}") for n in subs] or [(node.lineno, node.module)]
    return found


def violations(paths) -> list[str]:
    out = []
    for path in paths:
        me = layer_of(module_name(path))
        for line, target in imported(path):
            other = layer_of(target)
            if other != me and other not in ALLOWED[me]:
                out.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {me} imports {other} ({target})")
    return out


def test_imports_point_down_the_layers():
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 30
    assert violations(paths) == []


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch):
    # A physics module that imports the study: the test above would fail on it.
    fake = tmp_path / "ptycho"
    (fake / "physics").mkdir(parents=True)
    (fake / "cli.py").write_text("")
    bad = fake / "physics" / "bad.py"
    bad.write_text("def f():\n    from ptycho.study import report\n    from ptycho import cli\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    assert violations([bad]) == [
        "ptycho/physics/bad.py:2: physics imports study (ptycho.study)",
        "ptycho/physics/bad.py:3: physics imports entry (ptycho.cli)",
    ]


def cycles(paths) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a loop, at run time
    (function-level imports included), each sorted; a package stands for its ``__init__``."""
    modules = {module_name(p): p for p in paths}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for _, target in imported(path, runtime=True):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                targets.add(target)
        graph[name] = targets
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_loop():
    # A loop makes import order matter and hides which module a concept lives in (the
    # tracking layer had six modules in one).
    assert cycles(sorted(PACKAGE.rglob("*.py"))) == []


def test_the_cycle_finder_finds_one(tmp_path, monkeypatch):
    fake = tmp_path / "ptycho" / "tracking"
    fake.mkdir(parents=True)
    (fake / "a.py").write_text("def f():\n    from ptycho.tracking.b import g\n")
    (fake / "b.py").write_text("from ptycho.tracking import a\n")
    (fake / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ptycho.tracking.a import f\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "ptycho")
    assert cycles(sorted(fake.glob("*.py"))) == [["ptycho.tracking.a", "ptycho.tracking.b"]]
