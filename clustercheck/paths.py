"""Where the shipped suites and threshold profiles live: package data (`clustercheck/data/`), read with
importlib.resources, so a wheel installed anywhere finds them. In a checkout `clustercheck/data/suites`
and `clustercheck/data/thresholds` are links to the top-level `suites/` and `thresholds/`, the source."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def data_dir(name: str) -> Path:
    """`suites` or `thresholds` shipped with the package (a real directory: wheels are unpacked)."""
    return Path(str(resources.files("clustercheck") / "data" / name))


def display(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def shipped_name(path: Path) -> str | None:
    """`suites/cpu-smoke.yaml` for a suite or profile shipped with clustercheck (wherever the package was
    installed: a venv's site-packages path means nothing to a user), None for any other file."""
    for kind in ("suites", "thresholds"):
        try:
            if path.resolve().parent == data_dir(kind).resolve():
                return f"{kind}/{path.name}"
        except OSError:
            continue
    return None


def shipped_path(name: str) -> Path | None:
    """The file behind a shipped name (`suites/cpu-smoke.yaml`), None when `name` is not one."""
    kind, _, file = name.partition("/")
    if kind not in ("suites", "thresholds") or not file or "/" in file:
        return None
    path = data_dir(kind) / file
    return path if path.is_file() else None


def shown(path: Path) -> str:
    """A suite or profile as messages name it: a shipped one by name, others as `display` does."""
    return shipped_name(path) or display(path)
