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


def room(module: str) -> str:
    """The room a module lives in: its package under clustercheck/, or the top-level module itself."""
    parts = module.split(".")
    if len(parts) > 2 or (PACKAGE / parts[-1]).is_dir():
        return parts[1] + "/" if len(parts) > 1 else "clustercheck"
    return parts[-1] + ".py" if len(parts) > 1 else "clustercheck"


def test_the_packages_import_each_other_one_way() -> None:
    """Rooms too: no package imports a package that imports it back (docs/design.md draws the layers)."""
    g = graph()
    rooms: dict[str, set[str]] = {}
    for name, deps in g.items():
        rooms.setdefault(room(name), set()).update(room(d) for d in deps if room(d) != room(name))
    found = cycles(rooms)
    assert not found, "packages that import each other: " + "; ".join(" <-> ".join(c) for c in found)


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
    launcher's capabilities (`remote`), so a new launcher touches one file."""
    named = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py") if p.name != "launch.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "launcher.kind ==" in line or "launcher.kind !=" in line or ".kind in (" in line and "launch" in line]
    assert not named, named


def _design_table() -> dict[str, int]:
    """`docs/design.md`'s "Where to add what": extension -> the number of files it touches."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("## Where to add what", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("| a ")]
    return {cells[0].strip(): int(cells[-1].strip()) for cells in rows}


def test_where_to_add_what_is_true(tmp_path: Path) -> None:
    """The extension table of docs/design.md, each count checked against the code."""
    import ast as _ast
    import importlib

    from clustercheck import kinds, probes
    from clustercheck.report import REPORTS
    from clustercheck.report.terminal import FILES
    from clustercheck.run import options
    from clustercheck.run.launch import LAUNCHERS

    table = _design_table()
    assert table == {"a measure kind": 3, "a measure kind, outside clustercheck": 0, "a probe": 2, "a launcher": 1,
                     "a report format": 2}, table
    g = graph()
    importers = {m: {n for n, deps in g.items() if m in deps} for m in g}

    # a kind: its module, the registry, its rank side; nothing else imports it
    builtin = [m for m, p in modules().items() if m.startswith("clustercheck.kinds.") and "\nPROVIDES = " in p.read_text()]
    assert len(builtin) == 12, builtin
    for m in builtin:
        runners = {k.runner.split(":")[0] for k in importlib.import_module(m).PROVIDES}
        assert all(r.startswith("clustercheck.measure") for r in runners), (m, runners)
        assert m in g["clustercheck.kinds"] and importers[m] <= {"clustercheck.kinds", *runners}, (m, importers[m])
    # from outside: a keyword registration or an entry point, no file of clustercheck
    assert kinds.ENTRY_POINTS == "clustercheck.kinds" and "replace" in kinds.register.__kwdefaults__

    # a probe: its module and one line of _MODULES; no other module lists probe names
    with_probe = {m.rsplit(".", 1)[1] for m, p in modules().items()
                  if m.startswith("clustercheck.probes.") and "\nPROBE = " in p.read_text()}
    assert sorted(probes._MODULES.values()) == sorted(with_probe)
    names = set(probes.NAMES)
    for m, path in modules().items():
        if m == "clustercheck.probes":
            continue
        for node in _ast.walk(_ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (_ast.Tuple, _ast.List, _ast.Set, _ast.Dict)):
                elts = node.keys if isinstance(node, _ast.Dict) else node.elts
                listed = {e.value for e in elts if isinstance(e, _ast.Constant) and e.value in names}
                assert len(listed) < 3, f"{m} lists probes {sorted(listed)}: the registry is probes._MODULES"

    # a launcher: run/launch.py alone; --launcher's choices are LAUNCHERS'
    (launcher,) = [o for o in options.RUN_OPTIONS if o.name == "launcher"]
    assert launcher.choices == tuple(LAUNCHERS)

    # a report format: its module, and REPORTS / _render in report/__init__.py; the terminal lists REPORTS
    from helpers import render_all
    from test_reports import write_record

    written = render_all(write_record(tmp_path / "run.jsonl"), tmp_path)
    assert {k: p.name for k, p in written.items()} == REPORTS and set(REPORTS.values()) <= set(FILES)
