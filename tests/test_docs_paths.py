"""Every source, test and benchmark path README.md and docs/*.md name exists: a module moved into a package
(clustercheck/specs.py -> clustercheck/judging/specs.py) left the docs pointing readers at nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# clustercheck/judging/specs.py, tests/fixtures/..., benchmarks/..., a glob such as tests/test_amd_*.py;
# not part of a longer path or URL (github.com/x/clustercheck/...)
ROOTED = re.compile(r"(?<![\w/.-])((?:clustercheck|tests|benchmarks)/[\w./*-]*[\w*])")
# a module named inside its package, in backticks: `run/binding.py`, `judging/expr.py`
PACKAGED = re.compile(r"`(\w+/[\w/]*\.py)`")


def named_paths() -> list[tuple[str, str]]:
    """(where, path): each path a doc names, with its file and line."""
    packages = {p.name for p in (REPO / "clustercheck").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    out = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            where = f"{doc.relative_to(REPO)}:{number}"
            out += [(where, m.group(1).rstrip(".")) for m in ROOTED.finditer(line)]
            out += [(where, f"clustercheck/{m.group(1)}") for m in PACKAGED.finditer(line)
                    if m.group(1).split("/")[0] in packages]
    return out


def test_the_docs_name_paths_at_all() -> None:
    """The pattern finds what it is for (a regex that matched nothing would pass the test below)."""
    found = {path for _, path in named_paths()}
    assert "clustercheck/judging/specs.py" in found and "clustercheck/measure/binding.py" in found


def test_every_path_the_docs_name_exists() -> None:
    missing = [f"{where}: {path}" for where, path in named_paths()
               if not (any(REPO.glob(path)) if "*" in path else (REPO / path).exists())]
    assert missing == [], "named in the docs, not in the repository:\n" + "\n".join(missing)
