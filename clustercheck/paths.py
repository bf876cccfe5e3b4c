"""Where the shipped suites and threshold profiles live."""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """`suites` or `thresholds` of this checkout (editable install), else of the working directory."""
    shipped = _CHECKOUT / name
    return shipped if shipped.is_dir() else Path.cwd() / name


def display(path: Path) -> str:
    """A path as a user would type it: relative to the working directory when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
