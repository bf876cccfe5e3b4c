"""Active NVLinks per GPU (`nvidia-smi nvlink -s`) against the platform's count.

A GPU with fewer active links than the platform's `nvlinks_per_gpu` (18 on H100/H200/B200 SXM, 12 on A100
SXM, 4 on an NVLink-bridged A40 pair) fails, and so does a GPU whose links are all inactive. Without a
profile, every GPU must have as many active links as the best GPU (reference/measurement.md 5.6).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.probes import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, evidence_lines

_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?$")
_LINK = re.compile(r"^Link (\d+): (.+)$")


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    links: tuple[tuple[int, float | None], ...]   # (link, GB/s) with None for an inactive link
    all_inactive: bool = False                    # NVML: "all links are inactive"

    @property
    def active(self) -> int:
        return sum(1 for _, speed in self.links if speed is not None)


def parse(text: str) -> tuple[NvlinkGpu, ...]:
    gpus: list[NvlinkGpu] = []
    cur: tuple[int, str] | None = None
    links: list[tuple[int, float | None]] = []
    inactive = False

    def close() -> None:
        if cur is not None:
            gpus.append(NvlinkGpu(cur[0], cur[1], tuple(links), inactive))

    for number, line in enumerate(evidence_lines(text), 1):
        s = line.strip()
        m = _GPU.match(s)
        if m:
            close()
            cur, links, inactive = (int(m.group(1)), m.group(2)), [], False
            continue
        lm = _LINK.match(s)
        if lm and cur is not None:
            value = lm.group(2).strip()
            speed = re.match(r"^([\d.]+)\s*GB/s$", value)
            if not speed and "inactive" not in value.lower():
                raise ProbeParseError(f"line {number}: expected 'Link N: 25 GB/s' or '<inactive>', got {s!r}")
            links.append((int(lm.group(1)), float(speed.group(1)) if speed else None))
        elif cur is not None and "all links are inactive" in s.lower():
            inactive = True
    close()
    if not gpus:
        raise ProbeParseError("expected `nvidia-smi nvlink -s` output: 'GPU 0: <name> (UUID: ...)' lines "
                              "followed by 'Link N: 25 GB/s'")
    return tuple(gpus)


def judge(gpus: tuple[NvlinkGpu, ...], expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    want = expect.get("nvlinks_per_gpu")
    target = want if want is not None else max(g.active for g in gpus)
    source = "platform expects" if want is not None else "best GPU here has"
    out = []
    for g in gpus:
        ok = g.active >= target and not (g.all_inactive and target > 0) and not (g.all_inactive and want is None)
        speeds = sorted({s for _, s in g.links if s is not None})
        detail = (f"all NVLinks inactive ({g.name})" if g.all_inactive else
                  f"{g.active} active link(s) at {'/'.join(f'{s:g}' for s in speeds) or '-'} GB/s; {source} {target}")
        down = [str(k) for k, s in g.links if s is None]
        if down:
            detail += f"; inactive: link {', '.join(down)}"
        out.append(ProbeVerdict(f"GPU{g.index}", "active NVLinks", ok, detail, g.active, target))
    return out


def collect() -> str:
    tool = shutil.which("nvidia-smi")
    if not tool:
        raise ProbeSkip("nvidia-smi not found: no NVIDIA driver on this machine")
    out = subprocess.run([tool, "nvlink", "-s"], capture_output=True, text=True, timeout=120, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise ProbeSkip(f"nvidia-smi nvlink -s reports nothing (exit {out.returncode}): no NVLink on this machine")
    return out.stdout


PROBE = Probe(
    name="nvlink",
    description="active NVLinks per GPU vs the platform's count",
    input_help="`nvidia-smi nvlink -s` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("nvlinks_per_gpu",),
)
