"""The house has no import circle: every `import` and `from ... import` of clustercheck's modules, at module
level, inside functions and under TYPE_CHECKING alike, read with `ast`, makes a graph with no cycle. A
function-level import is still a dependency; hiding a circle inside a function does not open it.

`from clustercheck.pkg import name` depends on `clustercheck.pkg.name` when that is a module, else on the
package `clustercheck.pkg` (its __init__). Importing a submodule also runs its package's __init__: the
packages of the run loop, the judging and the record are therefore docstrings alone, and `kinds`, whose
registry imports the built-in kind modules, is imported by none of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "clustercheck"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The clustercheck modules `name` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "clustercheck")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "clustercheck":
                continue
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def test_no_module_of_clustercheck_imports_itself_back_through_others() -> None:
    found = cycles(graph())
    assert not found, "import circles:\n" + "\n".join(
        f"{len(c)} modules: " + " -> ".join(m.removeprefix("clustercheck.") for m in c) for c in found)


def test_the_cycle_finder_finds_a_circle_hidden_in_a_function(tmp_path: Path) -> None:
    """The test above can fail: a two-module circle, one side imported inside a function, is found."""
    (tmp_path / "clustercheck").mkdir()
    (tmp_path / "clustercheck" / "a.py").write_text("from clustercheck.b import x\n")
    (tmp_path / "clustercheck" / "b.py").write_text("def x():\n    from clustercheck import a\n")
    known = {"clustercheck.a": tmp_path / "clustercheck" / "a.py", "clustercheck.b": tmp_path / "clustercheck" / "b.py"}
    g = {n: imports(n, p, known) for n, p in known.items()}
    assert cycles(g) == [["clustercheck.a", "clustercheck.b"]]


@pytest.mark.parametrize("limit", [25])
def test_the_top_level_holds_few_modules_and_none_is_long(limit: int) -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= limit, top
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 400}
    assert not long, long


def test_launchers_are_told_apart_by_their_capabilities_not_their_names() -> None:
    """Only launch.py knows the launchers by name (its LAUNCHERS table); the pool and the session read a
    launcher's capabilities (`remote`, `merged_log`), so a new launcher touches one file."""
    named = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py") if p.name != "launch.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "launcher.kind ==" in line or "launcher.kind !=" in line or ".kind in (" in line and "launch" in line]
    assert not named, named
