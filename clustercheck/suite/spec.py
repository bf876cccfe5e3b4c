"""What a suite file says, as frozen data: each check (`CheckSpec`, remembering its file and line) and the
suite. A leaf: the kinds, the judging and the run loop all read it, and it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Where a check runs and what gets a verdict (docs/design.md): each node on its own, one collective over
# every rank, node pairs, each GPU, each GPU pair, or the localization planner's rounds.
SCOPES = ("node", "cluster", "pair", "gpu", "gpu-pair", "localize")


@dataclass(frozen=True)
class CheckSpec:
    id: str
    measure: str
    scope: str
    params: dict[str, Any] = field(hash=False)
    env: tuple[tuple[str, str], ...]
    timeout: float
    description: str
    file: str
    line: int
    limits: str = ""  # judge by the profile's checks.<this id> when it names none for this check's own id
    limits_line: int = 0

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    file: str
    checks: tuple[CheckSpec, ...]
