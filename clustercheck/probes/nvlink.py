"""Active NVLinks per GPU (`nvidia-smi nvlink -s`), their speed, and the platform's count.

Without any expectation a GPU fails when it has no active link, when one of its links is `<inactive>`
among active ones, when it has fewer active links than the best GPU here (NVML nvmlDeviceGetNvLinkState per link),
or when a link runs slower than the fastest link of the same GPU model here. With `nvlinks_per_gpu` (18
on H100/H200/B200 SXM, 12 on A100 SXM, 12 on an NVLink-bridged H100 PCIe pair, 4 on a bridged A40 pair)
a GPU needs that many active links (0: a platform without NVLink), and inactive links beyond them are
the bridge's unused ones: a bridged H100 PCIe pair shows 6 of its 18 links inactive when healthy
(HPE-Japan-Presales/e-learning, gpu/h100/mgmt_gpu_on_dl380agen11.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.probes import nvsmi, tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict
from clustercheck.toolout import evidence_lines

_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?$")
_LINK = re.compile(r"^Link (\d+): (.+)$")
_ELIDED = re.compile(r"^(?:\.{3,}|\[\.\.\.\]|…)$")


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
    tool.refuse_crashed(text)
    gpus: list[NvlinkGpu] = []
    cur: tuple[int, str] | None = None
    links: list[tuple[int, float | None]] = []
    inactive = False

    def close() -> None:
        if cur is not None:
            gpus.append(NvlinkGpu(cur[0], cur[1], tuple(links), inactive))

    for number, line in enumerate(evidence_lines(text), 1):
        s = line.strip()
        if _ELIDED.match(s):
            # counting the links shown would invent a GPU with fewer links than it has
            raise ProbeParseError(f"line {number}: the capture is elided ({s!r}): links left out cannot be "
                                  f"judged; capture the whole `nvidia-smi nvlink -s` output")
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
    if not any(g.links or g.all_inactive for g in gpus):
        # `nvidia-smi -L` prints the same GPU lines; without one link line nothing here is NVLink status
        raise ProbeParseError("no 'Link N:' line under any GPU: expected `nvidia-smi nvlink -s` output, not a "
                              "GPU list such as `nvidia-smi -L`")
    return tuple(gpus)


def _speeds(links: tuple[tuple[int, float | None], ...]) -> str:
    return "/".join(f"{s:g}" for s in sorted({s for _, s in links if s is not None})) or "-"


def judge(gpus: tuple[NvlinkGpu, ...], expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    want = expect.get("nvlinks_per_gpu")
    if not any(g.links or g.all_inactive for g in gpus) and not want:
        raise ProbeSkip(f"{UNLISTED}{'' if gpus else ', and nvidia-smi lists no GPU'}: no NVLink on this "
                        f"machine")  # only `collect` makes such GPUs, or none
    if not gpus:  # a platform with NVLink whose nvidia-smi shows neither links nor GPUs: the node fails
        return [ProbeVerdict("node", "active NVLinks", False, f"{UNLISTED} and nvidia-smi lists no GPU; platform "
                             f"expects {want} per GPU", measured=0, expected=want)]
    best = max(g.active for g in gpus)
    fastest: dict[str, float] = {}  # per GPU model: GPUs of one model run their links at one speed
    for g in gpus:
        for _, s in g.links:
            if s is not None:
                fastest[g.name] = max(s, fastest.get(g.name, s))
    out = []
    for g in gpus:
        problems: list[str] = []
        down = [str(k) for k, s in g.links if s is None]
        if g.active == 0 and want != 0:  # nvlinks_per_gpu: 0 says a platform without NVLink (PCIe cards)
            problems.append("no active NVLink (all links inactive)" if g.all_inactive or g.links else
                            f"no link listed under this GPU{f'; platform expects {want}' if want else ''}")
        elif want is not None and g.active < want:
            problems.append(f"{g.active} active link(s); platform expects {want}")
        elif want is None and down:
            problems.append(f"link {', '.join(down)} inactive among {g.active} active "
                            f"(a bridged PCIe pair uses only some links: set nvlinks_per_gpu)")
        elif want is None and g.active < best:
            problems.append(f"{g.active} active link(s); the best GPU here has {best}")
        top = fastest.get(g.name)
        slow: dict[float, list[str]] = {}
        for k, s in g.links:
            if s is not None and top is not None and s < top:
                slow.setdefault(s, []).append(str(k))
        peer = "its other links" if any(x == top for _, x in g.links) else f"other {g.name} GPUs' links"
        for s, ks in sorted(slow.items()):
            problems.append(f"link {', '.join(ks)} at {s:g} GB/s while {peer} run at {top:g} GB/s")
        detail = "; ".join(problems) if problems else (
            f"{g.active} active link(s) at {_speeds(g.links)} GB/s" +
            (f"; platform expects {want}" if want is not None else f"; best GPU here has {best}") +
            (f" (inactive, unused by the platform: link {', '.join(down)})" if down else ""))
        out.append(ProbeVerdict(f"GPU{g.index}", "active NVLinks", not problems, detail, g.active,
                                want if want is not None else best))
    return out


UNLISTED = "nvidia-smi nvlink -s lists no link"


def collect() -> str | tuple[NvlinkGpu, ...]:
    """The text, or, where `nvlink -s` exits 0 and prints nothing (a node without NVLink; also an SXM H100
    alone in a VM, driver 580.159.04: tests/fixtures/nvidia-smi-nvlink-s/h100-sxm-vm-empty.txt), every GPU
    nvidia-smi lists with no link: `judge` skips that without an NVLink expectation and fails each GPU of a
    platform that has NVLink, whose links a driver or fabric fault can hide just so. A non-zero exit was
    an error in run()."""
    text = nvsmi.run("nvlink", "-s")
    if re.search(r"^\s*Link \d+:|all links are inactive", text, re.MULTILINE | re.IGNORECASE):
        return text
    listed = nvsmi.run("--query-gpu=index,name", "--format=csv,noheader")
    gpus = []
    for line in listed.splitlines():
        index, _, name = line.partition(",")
        if not index.strip().isdigit():
            raise ProbeParseError(f"`nvidia-smi --query-gpu=index,name`: expected 'INDEX, NAME', got {line!r}")
        gpus.append(NvlinkGpu(int(index), name.strip(), ()))
    return tuple(gpus)


PROBE = Probe(
    name="nvlink",
    description="active NVLinks per GPU and their speed vs each other and the platform's count",
    input_help="`nvidia-smi nvlink -s` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("nvlinks_per_gpu",),
    by_index=True,
)
