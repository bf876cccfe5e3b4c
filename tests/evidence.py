"""Real captured tool outputs for parser and probe tests, kept in tests/fixtures/ (each file's first line
names its public source; tool-outputs/INDEX.md lists the key numbers of each)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TOOLS = FIXTURES / "tool-outputs"
SEEDS = FIXTURES / "seeds"
LENT = FIXTURES / "gpu-validation"  # captured on GPUs lent to clustercheck's own validation (docs/validation/)


def files(folder: str) -> list[Path]:
    found = sorted((TOOLS / folder).glob("*.txt"))
    assert found, f"no fixtures in {TOOLS / folder}"
    return found


def text(folder: str, name: str) -> str:
    return (TOOLS / folder / name).read_text(encoding="utf-8")


def seed_block(seed: str, marker: str) -> str:
    """The fenced block of a seed page excerpt that contains `marker`."""
    blocks = (SEEDS / seed).read_text(encoding="utf-8").split("```")
    for block in blocks[1::2]:
        if marker in block:
            return block
    raise AssertionError(f"no block with {marker!r} in {seed}")


def ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]
