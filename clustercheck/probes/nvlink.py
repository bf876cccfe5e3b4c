"""Active NVLinks per GPU (`nvidia-smi nvlink -s`), their speed, and the platform's count.

Without any expectation a GPU fails when it has no active link, when one of its links is `<inactive>`
among active ones, when it has fewer active links than the best GPU here (NVML nvmlDeviceGetNvLinkState per link),
or when a link runs slower than the fastest link of the same GPU model here. With `nvlinks_per_gpu` (18
on H100/H200/B200 SXM, 12 on A100 SXM, 12 on an NVLink-bridged H100 PCIe pair, 4 on a bridged A40 pair)
a GPU needs exactly that many active links (0: a platform without NVLink; more is another GPU or board
than the platform's), and inactive links beyond them are the bridge's unused ones: a bridged H100 PCIe pair
shows 6 of its 18 links inactive when healthy (HPE-Japan-Presales/e-learning,
gpu/h100/mgmt_gpu_on_dl380agen11.md). Every GPU is listed once, numbered
from 0 without a gap, and with `gpu_count` as many as the platform has; a link listed twice or at 0 GB/s
fails its GPU.

An elided capture (`...` where the author cut it) is judged on what it shows when that already decides: a
link shown inactive fails, whatever was left out; the GPUs and links left out are `not judged`. An elided
capture in which nothing shown fails decides nothing and is refused (exit 4).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from clustercheck.probes import nvsmi, tool
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, count_of, gaps, not_judged
from clustercheck.toolout import count, evidence_lines

_GPU = re.compile(r"^GPU (\d{1,6}): (.+?)(?: \(UUID: [^)]*\))?$")
_LINK = re.compile(r"^Link (\d{1,6}): (.+)$")
_SPEED = re.compile(r"^(\d{1,6}(?:\.\d{1,6})?)\s*GB/s$")
_ELIDED = re.compile(r"^(?:\.{3,}|\[\.\.\.\]|…)$")


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    links: tuple[tuple[int, float | None], ...]   # (link, GB/s) with None for an inactive link
    all_inactive: bool = False                    # NVML: "all links are inactive"
    elided: bool = False                          # an elision ('...') inside its block: links may be left out

    @property
    def active(self) -> int:
        return sum(1 for _, speed in self.links if speed is not None and speed > 0)


@dataclass(frozen=True)
class NvlinkReport:
    """What `nvidia-smi nvlink -s` listed, with the lines where the capture was elided."""

    gpus: tuple[NvlinkGpu, ...]
    elisions: tuple[int, ...] = ()
    missing: str = ""  # live, nvidia-smi not on PATH: why nothing was read (nvsmi.without judges it)


def parse(text: str) -> NvlinkReport:
    tool.refuse_crashed(text, nvsmi.ERRORS)
    gpus: list[NvlinkGpu] = []
    cur: tuple[int, str] | None = None
    links: list[tuple[int, float | None]] = []
    inactive = elided = False
    elisions: list[int] = []

    def close() -> None:
        if cur is not None:
            gpus.append(NvlinkGpu(cur[0], cur[1], tuple(links), inactive, elided))

    for number, line in enumerate(evidence_lines(text), 1):
        s = line.strip()
        if _ELIDED.match(s):
            # links left out cannot be counted; judge() decides whether what is shown still decides
            elisions.append(number)
            elided = cur is not None
            continue
        m = _GPU.match(s)
        if m:
            close()
            cur, links, inactive, elided = (int(m.group(1)), m.group(2)), [], False, False
            continue
        lm = _LINK.match(s)
        if lm and cur is not None:
            value = lm.group(2).strip()
            speed = _SPEED.match(value)
            if not speed and "inactive" not in value.lower():
                raise ProbeParseError(f"line {number}: expected 'Link N: 25 GB/s' or '<inactive>', got {s[:120]!r}")
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
    return NvlinkReport(tuple(gpus), tuple(elisions))


def _speeds(links: tuple[tuple[int, float | None], ...]) -> str:
    return "/".join(f"{s:g}" for s in sorted({s for _, s in links if s is not None})) or "-"


def judge(report: NvlinkReport | tuple[NvlinkGpu, ...], expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    if not isinstance(report, NvlinkReport):
        report = NvlinkReport(tuple(report))
    if report.missing:
        return nvsmi.without(report.missing, expect, "nvlinks_per_gpu", "active NVLinks")
    gpus, elisions = report.gpus, report.elisions
    want = expect.get("nvlinks_per_gpu")
    per_node = expect.get("gpu_count")
    if not any(g.links or g.all_inactive for g in gpus) and not want:
        raise ProbeSkip(f"{UNLISTED}{'' if gpus else ', and nvidia-smi lists no GPU'}: no NVLink on this "
                        f"machine")  # only `collect` makes such GPUs, or none
    if not gpus:  # a platform with NVLink whose nvidia-smi shows neither links nor GPUs: the node fails
        return [ProbeVerdict("node", "active NVLinks", False, f"{UNLISTED} and nvidia-smi lists no GPU; platform "
                             f"expects {want} per GPU", measured=0, expected=want)]
    here = _Here.of(gpus)  # once for all GPUs: computed per GPU, judging N GPUs took N^2 steps
    out = [_gpu_verdict(g, here, want) for g in gpus]
    if not elisions:
        listed = _listed_verdict(gpus, per_node)
        return out + ([listed] if listed is not None else [])
    # an elided capture: what is shown and fails, fails whatever was left out; a GPU whose block the
    # elision cut, and the GPUs left out, are not judged; with nothing failing, nothing here decides
    where = f"line {', '.join(str(n) for n in elisions[:3])}"
    if all(v.passed for v in out):
        raise ProbeParseError(f"{where}: the capture is elided ('...'): the links left out cannot be judged and no "
                              f"link shown fails; capture the whole `nvidia-smi nvlink -s` output")
    kept = [v if v.passed is False or not g.elided else
            not_judged(v.subject, v.what, f"its links are cut by the elision at {where} ({v.detail})", v.measured,
                       v.expected)
            for g, v in zip(gpus, out)]
    return kept + [not_judged("node", "GPUs listed", f"the capture is elided at {where}: GPUs and links left out "
                              f"there are not judged ({len(gpus)} GPU(s) shown)", len(gpus), per_node)]


def _listed_verdict(gpus: tuple[NvlinkGpu, ...], per_node: object) -> ProbeVerdict | None:
    """Every GPU once, numbered 0.. without a gap, as many as the platform's gpu_count."""
    seen: dict[int, int] = {}
    for g in gpus:
        seen[g.index] = seen.get(g.index, 0) + 1
    problems = []
    twice = sorted(i for i, k in seen.items() if k > 1)
    if twice:
        problems.append(f"GPU {', '.join(map(str, twice))} listed twice")
    want = count_of(per_node)
    gone = [str(i) for i in gaps(seen, max(max(seen) + 1, want or 0))]
    if gone and (want is not None or len(seen) > 1):
        problems.append(f"GPU {', '.join(gone[:8])}{' and more' if len(gone) > 8 else ''} not listed")
    if want is not None and len(seen) != want:
        problems.append(f"{len(seen)} GPU(s) listed, the platform has {want}")
    if problems:
        return ProbeVerdict("node", "GPUs listed", False, "; ".join(problems), len(seen), want)
    if want is None:
        return None
    return ProbeVerdict("node", "GPUs listed", True, f"GPU 0..{want - 1}, each once, as the platform has", len(seen),
                        want)


@dataclass(frozen=True)
class _Here:
    """What every GPU is compared with: the most active links of any GPU here, and per GPU model the most
    links listed (NVML lists every link a GPU has, so GPUs of one model list as many: fewer is a link left
    out; elided blocks do not count) and the fastest link (GPUs of one model run their links at one speed)."""

    best: int
    most: dict[str, int]
    fastest: dict[str, float]

    @classmethod
    def of(cls, gpus: tuple[NvlinkGpu, ...]) -> _Here:
        most: dict[str, int] = {}
        fastest: dict[str, float] = {}
        for x in gpus:
            if not x.elided:
                most[x.name] = max(len(x.links), most.get(x.name, 0))
            for _, speed in x.links:
                if speed:
                    fastest[x.name] = max(speed, fastest.get(x.name, speed))
        return cls(max((x.active for x in gpus), default=0), most, fastest)


def _gpu_verdict(g: NvlinkGpu, here: _Here, want: Any) -> ProbeVerdict:
    best, most, fastest = here.best, here.most.get(g.name, 0), here.fastest
    problems: list[str] = []
    down = [str(k) for k, s in sorted(g.links, key=lambda link: link[0]) if s is None]
    listed = Counter(k for k, _ in g.links)
    twice = sorted(k for k, n in listed.items() if n > 1)
    if twice:
        problems.append(f"link {', '.join(map(str, twice))} listed twice")
    # nvidia-smi lists a GPU's links 0..N-1; a number left out is a link nobody judged
    gone = [str(k) for k in gaps(listed, max(listed, default=-1) + 1)]
    if gone and not g.elided:
        problems.append(f"link {', '.join(gone[:8])} not listed")
    elif g.links and len(g.links) < most and not g.elided:
        problems.append(f"{len(g.links)} link(s) listed; other {g.name} GPUs here list {most}")
    zero = [str(k) for k, s in sorted(g.links, key=lambda link: link[0]) if s == 0]
    if zero:
        problems.append(f"link {', '.join(zero)} at 0 GB/s: up but moving nothing")
    if g.active == 0 and want != 0:  # nvlinks_per_gpu: 0 says a platform without NVLink (PCIe cards)
        problems.append("no active NVLink (all links inactive)" if g.all_inactive or g.links else
                        f"no link listed under this GPU{f'; platform expects {want}' if want else ''}")
    elif want is not None and g.active != want:  # more links up than the platform has: not its GPU or board
        problems.append(f"{g.active} active link(s); platform expects {want}")
    elif want is None and down:
        problems.append(f"link {', '.join(down)} inactive among {g.active} active "
                        f"(a bridged PCIe pair uses only some links: set nvlinks_per_gpu)")
    elif want is None and g.active < best:
        problems.append(f"{g.active} active link(s); the best GPU here has {best}")
    top = fastest.get(g.name)
    slow: dict[float, list[str]] = {}
    for k, speed in sorted(g.links, key=lambda link: link[0]):
        if speed and top is not None and speed < top:
            slow.setdefault(speed, []).append(str(k))
    peer = "its other links" if any(x == top for _, x in g.links) else f"other {g.name} GPUs' links"
    for speed, ks in sorted(slow.items()):
        problems.append(f"link {', '.join(ks)} at {speed:g} GB/s while {peer} run at {top:g} GB/s")
    detail = "; ".join(problems) if problems else (
        f"{g.active} active link(s) at {_speeds(g.links)} GB/s" +
        (f"; platform expects {want}" if want is not None else f"; best GPU here has {best}") +
        (f" (inactive, unused by the platform: link {', '.join(down)})" if down else ""))
    return ProbeVerdict(f"GPU{g.index}", "active NVLinks", not problems, detail, g.active,
                        want if want is not None else best)


UNLISTED = "nvidia-smi nvlink -s lists no link"


def collect() -> str | NvlinkReport:
    """The text, or, where `nvlink -s` exits 0 and prints nothing (a node without NVLink; also an SXM H100
    alone in a VM, driver 580.159.04: tests/fixtures/nvidia-smi-nvlink-s/h100-sxm-vm-empty.txt), every GPU
    nvidia-smi lists with no link: `judge` skips that without an NVLink expectation and fails each GPU of a
    platform that has NVLink, whose links a driver or fabric fault can hide just so. A non-zero exit was
    an error in run()."""
    text = nvsmi.collect_report("nvlink", "-s")
    if not isinstance(text, str):
        return NvlinkReport((), missing=text.missing)
    if re.search(r"^\s*Link \d+:|all links are inactive", text, re.MULTILINE | re.IGNORECASE):
        return text
    listed = nvsmi.run("--query-gpu=index,name", "--format=csv,noheader")
    gpus = []
    for line in listed.splitlines():
        index, _, name = line.partition(",")
        if count(index) is None:
            raise ProbeParseError(f"`nvidia-smi --query-gpu=index,name`: expected 'INDEX, NAME', got {line!r}")
        gpus.append(NvlinkGpu(int(index), name.strip(), ()))
    return NvlinkReport(tuple(gpus))


PROBE = Probe(
    name="nvlink",
    description="active NVLinks per GPU and their speed vs each other and the platform's count",
    input_help="`nvidia-smi nvlink -s` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("nvlinks_per_gpu", "gpu_count"),
    by_index=True,
)
