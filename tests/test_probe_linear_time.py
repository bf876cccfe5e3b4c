"""Every probe reads a 4 MiB line in under two CPU seconds: its parser and judge are linear in the input.

A regex that starts an unbounded `[^\\s:]+` or `.*?` at every position of a line takes quadratic time: on
one line without spaces the nccl-tests probe took over a minute for 1 MiB, and a native tool that printed
one 96 KiB line stalled a run by 18 s. Each probe here gets lines of the shapes that make such patterns
backtrack (one character repeated, one token repeated with and without spaces) and lines of its own real
captures stretched to 4 MiB, each alone and behind the prefixes its parser looks for. The time measured is
this process's CPU time, so that other work on a shared machine does not count against the probe.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clustercheck import probes
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from evidence import TOOLS

SIZE = 4 << 20  # a quadratic pattern takes minutes here: one took 18 s on a 96 KiB line
# seconds of CPU for one 4 MiB line, parse and judge together: a quadratic pattern takes minutes, the slowest
# linear one (pci-acs behind 'ACSCtl: ') 0.53-0.57 s on the 2-vCPU VM of 2026-11-27, where a CI run
# failed at the earlier 0.5 s; its time doubles with the line (0.14 s at 1 MiB, 1.16 s at 8 MiB)
LIMIT = 2.0
UNITS = ("x", "-", "7", " 1", "a:", "\t", ".", "(", "h:1:2 [0] NCCL INFO ", "Link 0: ", "err=", "1e")
PREFIXES = ("", "# ", " 0: ", "GPU0 ", "memcpy CE ", "SUM x ", "ACSCtl: ", "NCCL WARN ", "GPU 0: x\n")
FIXTURES = {"versions": "nvidia-smi-q", "pci-acs": "lspci-acs", "pcie-link": "lspci-acs", "topo": "nvidia-smi-topo",
            "numa": "nvidia-smi-topo", "nvlink": "nvlink-status", "fabric": "nvidia-smi-q", "ecc": "nvidia-smi-q",
            "throttle": "nvidia-smi-q", "gds": "gdscheck", "ib": "ibstat", "nccl-tests": "nccl-tests",
            "nvbandwidth": "nvbandwidth", "amd-smi": "amd-smi", "amd-host": "amd-smi", "env": "nvidia-smi-q",
            "gdsio": "gdsio", "ib-write-bw": "ib_write_bw", "nccl-log": "../nccl-debug"}


def stretched(line: str) -> str:
    """A capture's line made 4 MiB long by repeating its text after its first few characters."""
    head, tail = line[:12], line[12:] or line or "x"
    return head + tail * ((SIZE - len(head)) // len(tail) + 1)


def lines_for(name: str) -> list[tuple[str, str]]:
    """(label, 4 MiB line) for one probe."""
    out = [(repr(unit), unit * (SIZE // len(unit))) for unit in UNITS]
    out += [(f"{prefix!r}+{unit!r}", prefix + unit * (SIZE // len(unit))) for prefix in PREFIXES[1:]
            for unit in ("x", " 1")]
    capture = sorted((TOOLS / FIXTURES[name]).resolve().glob("*.txt"))[0]
    body = [l for l in capture.read_text(encoding="utf-8").split("\n")[2:] if l.strip()]
    picked = body[:3] + body[len(body) // 2:len(body) // 2 + 2] + body[-2:]
    return out + [(f"{capture.stem} line {body.index(l) + 3} stretched", stretched(l)) for l in picked]


def cpu_seconds(name: str, text: str) -> float:
    probe = probes.get(name)
    t0 = time.process_time()
    try:
        parsed = probe.parse(text + "\n")
        try:
            probe.judge(parsed, {})
        except (ProbeSkip, ProbeParseError):
            pass
    except ProbeParseError:
        pass
    return time.process_time() - t0


@pytest.mark.parametrize("name", probes.NAMES)
def test_a_4_mib_line_is_read_in_linear_time(name: str) -> None:
    slow = []
    for label, line in lines_for(name):
        seconds = cpu_seconds(name, line)
        if seconds >= LIMIT:
            slow.append(f"{label}: {seconds:.2f} s")
    assert not slow, f"{name}: " + "; ".join(slow)


def test_the_lines_are_4_mib() -> None:
    assert all(len(line) >= SIZE - 16 for _, line in lines_for("nccl-tests"))


# -- many GPU blocks: the judge compares each GPU with the others once, never each with all ------------

def _nvlink_gpus(n: int) -> str:
    """The real A100 capture's GPU block (12 links at 25 GB/s) listed for GPU 0..n-1, the last one's link 11
    at 0 GB/s: one failing GPU among n, so the judge must compare every GPU with the rest."""
    capture = TOOLS / "nvlink-status" / "a100-sxm4-gpu7-nvlink-s-azure.txt"
    block = [line for line in capture.read_text(encoding="utf-8").split("\n")[2:] if line.strip()]
    assert block[0].startswith("GPU 7: NVIDIA A100-SXM4-80GB") and len(block) == 13
    out = [line.replace("GPU 7:", f"GPU {i}:", 1) if line.startswith("GPU 7:") else line
           for i in range(n) for line in block]
    out[-1] = out[-1].replace("Link 11: 25 GB/s", "Link 11: 0 GB/s")
    return "\n".join(out) + "\n"


def test_nvlink_judges_8x_the_gpus_in_about_8x_the_time() -> None:
    """Each GPU's verdict once recomputed the best, most and fastest links over every GPU: 2000 GPU blocks
    (1.1 MB) took 46 s, 8000 three minutes. Linear: 8x the GPUs within 3x of 8x the CPU time of the
    smaller input (a quadratic judge takes 64x), plus a constant for the interpreter's noise."""
    probe = probes.get("nvlink")
    seconds = []
    for n in (256, 2048):
        text = _nvlink_gpus(n)
        t0 = time.process_time()  # CPU time: the machine running the tests may be shared
        verdicts = probe.judge(probe.parse(text), {})
        seconds.append(time.process_time() - t0)
        failed = [v.subject for v in verdicts if not v.passed]
        assert len(verdicts) == n and failed == [f"GPU{n - 1}"], failed
    small, large = seconds
    assert large < 3 * 8 * small + 0.5, f"256 GPUs: {small:.2f} s of CPU, 2048 GPUs: {large:.2f} s"
