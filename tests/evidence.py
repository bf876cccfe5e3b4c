"""Real captured tool outputs for probe tests: /work/shared beside the checkout (CI has shared/ there)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
TOOLS = SHARED / "fixtures" / "tool-outputs"
SEEDS = SHARED / "seeds"


def files(folder: str) -> list[Path]:
    found = sorted((TOOLS / folder).glob("*.txt"))
    return found or [pytest.param(None, marks=pytest.mark.skip(reason=f"no {TOOLS / folder}"))]  # type: ignore[list-item]


def text(folder: str, name: str) -> str:
    path = TOOLS / folder / name
    if not path.is_file():
        pytest.skip(f"missing fixture {path}")
    return path.read_text(encoding="utf-8")


def seed_block(seed: str, marker: str) -> str:
    """The fenced block of a seed page that contains `marker` (seeds are markdown pages)."""
    path = SEEDS / seed
    if not path.is_file():
        pytest.skip(f"missing seed {path}")
    blocks = path.read_text(encoding="utf-8").split("```")
    for block in blocks[1::2]:
        if marker in block:
            return block
    raise AssertionError(f"no block with {marker!r} in {seed}")


def ids(paths: list[Path]) -> list[str]:
    return [p.stem if isinstance(p, Path) else "missing" for p in paths]
