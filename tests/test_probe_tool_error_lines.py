"""A tool's own error line inside a capture (nvidia-smi's `Unable to determine the device handle ...`,
ibstat's `ibpanic: ...`) fails the probe naming the line, whatever the rest of the capture shows: the GPU or
device it could not read is missing from what it printed after it. Inputs are real fixtures with the line
added."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.probes import get, tool
from clustercheck.probes.base import ProbeParseError
from evidence import TOOLS

REPO = Path(__file__).resolve().parent.parent
LOST = "Unable to determine the device handle for GPU 0000:DB:00.0: Unknown Error"
PANIC = "ibpanic: [12345] main: stat of IB device 'mlx4_2' failed: No such file or directory"


def cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def _nvlink_seven_after_a_lost_gpu() -> str:
    """The real A100 GPU 7 block as GPUs 0..6 (7 good GPUs), after nvidia-smi's line for the GPU it lost."""
    block = (TOOLS / "nvlink-status" / "a100-sxm4-gpu7-nvlink-s-azure.txt").read_text().split("\n", 2)[2]
    assert block.startswith("GPU 7: ")
    return LOST + "\n" + "".join(re.sub(r"^GPU 7:", f"GPU {i}:", block) for i in range(7))


def _ibstat_with_panic() -> str:
    return PANIC + "\n" + (TOOLS / "ibstat" / "2x-connectx3-mlx4-dualport-fdr56-active.txt").read_text()


def _nvsmi_q_with_lost_gpu() -> str:
    return (TOOLS / "nvidia-smi-q" / "h100-80gb-hbm3-nvidia-smi-a-della.txt").read_text() + LOST + "\n"


@pytest.mark.parametrize("probe, make, subject", [
    ("nvlink", _nvlink_seven_after_a_lost_gpu, "GPU 0000:DB:00.0"),
    ("ecc", _nvsmi_q_with_lost_gpu, "GPU 0000:DB:00.0"),
    ("ib", _ibstat_with_panic, "mlx4_2"),
])
def test_the_tools_own_error_line_fails_naming_it(probe, make, subject, tmp_path):
    capture = tmp_path / "capture.txt"
    capture.write_text(make())
    out = cc("probe", probe, "--input", str(capture))
    assert out.returncode == 1, out.stdout + out.stderr
    assert subject in out.stdout and "line " in out.stdout
    with pytest.raises(ProbeParseError) as caught:  # a reader that does not know ToolReported still refuses it
        get(probe).parse(make())
    assert isinstance(caught.value, tool.ToolReported)
    [verdict] = caught.value.verdicts
    assert (verdict.subject, verdict.word) == (subject, "FAIL")


def test_the_captures_without_the_line_still_pass():
    """The same inputs less the error line are judged as before (the line is what fails them)."""
    for probe, text in (("nvlink", _nvlink_seven_after_a_lost_gpu().split("\n", 1)[1]),
                        ("ib", _ibstat_with_panic().split("\n", 1)[1])):
        parsed = get(probe).parse(text)
        assert all(v.passed for v in get(probe).judge(parsed, {})), probe
