"""A signal while the join launcher imports torch for its store (run/join.py `serve_store`): torch's import
swallows a KeyboardInterrupt raised inside it (its optional numpy import turns it into an ImportError and goes
on), so SIGINT or SIGTERM there waits until the import is done (signals.deferred) and then stops the run as it
would anywhere else. A real process, with a stand-in `torch` first on its path that signals itself mid-import
and swallows what it gets, as torch does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TORCH = """import os, signal
try:  # as torch's optional numpy import: an interrupt in it is an ImportError, and the import goes on
    os.kill(os.getpid(), signal.{sig})
    for _ in range(10 ** 6):
        pass
except KeyboardInterrupt:
    pass
"""

DISTRIBUTED = """class TCPStore:  # what serve_store asks of torch's store: nothing here listens
    def __init__(self, *args, **kwargs):
        pass

    def set(self, key, value):
        pass
"""

CONTROLLER = """import sys
from clustercheck.run.join import JoinLauncher
from clustercheck.run.signals import term_stops_like_ctrl_c
with term_stops_like_ctrl_c("while the run was starting"):  # as cli.py's `clustercheck run`
    launcher = JoinLauncher(1, "127.0.0.1:29400", token="0" * 64, gather=False)
    launcher.port = 0  # a free one, as the hosts launcher takes
    launcher.listen()
    assert "torch" not in sys.modules, "torch is imported before serve_store: the test tests nothing"
    try:
        launcher.serve_store()
    except KeyboardInterrupt as exc:
        print("stopped:", exc)
    else:
        print("went on")
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_store_imports_torch_stops_the_run(tmp_path: Path, sig: str) -> None:
    """Failed before the fix: the stand-in torch swallowed the interrupt and serve_store went on ("went on")."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(TORCH.format(sig=sig))
    (tmp_path / "torch" / "distributed.py").write_text(DISTRIBUTED)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", CONTROLLER], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("stopped:"), (proc.stdout, proc.stderr)
    if sig == "SIGTERM":
        assert "SIGTERM while the run was starting" in proc.stdout
