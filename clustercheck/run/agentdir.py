"""A node agent's work directory (run/agent.py): its zygote's log, its ranks' output and NCCL's logs, made
under $TMPDIR when the agent starts. It goes when the agent ends, unless it holds what may be the only
trace of a run that did not end with the controller's goodbye (which has every rank's output by then)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable


def make() -> Path:
    return Path(tempfile.mkdtemp(prefix="clustercheck-agent-"))


def holds_output(workdir: Path) -> bool:
    """Whether some file under `workdir` is not empty: the agent makes its zygote's log before it joins,
    and an empty log is no trace of anything (an agent stopped before any pool kept a directory for it)."""
    return any(f.is_file() and f.stat().st_size for f in workdir.rglob("*"))


def leave(workdir: Path, keep: bool, say: Callable[[str], None]) -> None:
    """Keep `workdir` where `keep` (the agent ran a pool, lost the controller or was stopped) and it holds
    output, and say so; else remove it."""
    if keep and holds_output(workdir):
        say(f"the ranks' output and NCCL's logs stay in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
