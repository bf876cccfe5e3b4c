"""NVIDIA GPUDirect Storage's `gdsio`, judged per GPU: `clustercheck probe gdsio --input FILE`.

Every GPUDirect result (XferType GPUD) must reach `gdsio_read_min` / `gdsio_write_min` (GiB/s per GPU) for
its direction; results through host memory (CPUONLY, CPU_GPU) are shown beside them, as the comparison
that tells a slow GPUDirect path from slow drives (gdsio -x 0 against -x 1, as the Hugging Face playbook
and NVIDIA's GDS benchmarking guide do). A failure line fails the capture; so does a command line (`-d N`)
with no result line after it (cut off: that GPU was never measured) and a GPU measured twice the same way
(the same -d, direction, XferType and file: one GPU's result standing in for another's), and a GPU with no
GPUD result in a direction others have one in (of the platform's `gpu_count` GPUs, else of GPU 0 up to the
highest measured: its command and result both gone). No GPUD result, or
no floor for a direction measured, is not judged. Floors come from the drives or storage network behind the GPUs
(docs/fabric.md, "Storage into the GPU"), so no shipped profile sets them.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, count_of, gaps, not_judged
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import gdsio as reader
from clustercheck.toolout.gdsio import Gdsio, Result

_KEY = {"READ": "gdsio_read_min", "RANDREAD": "gdsio_read_min", "WRITE": "gdsio_write_min",
        "RANDWRITE": "gdsio_write_min"}


def parse(text: str) -> Gdsio:
    try:
        return reader.parse(text)
    except NotToolOutput as exc:
        raise ProbeParseError(str(exc)) from None


def collect() -> str:
    raise ProbeSkip("this probe judges captured gdsio output: give --input FILE; a suite runs it per GPU with "
                    "`measure: gdsio`")


def subject(r: Result) -> str:
    return f"GPU{r.gpu}" if r.gpu is not None else f"line {r.line}"


def judge(run: Gdsio, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    out = []
    if run.failure:
        out.append(ProbeVerdict("gdsio", "run", False, f"the run failed: {run.failure}", run.failure, "no error"))
    for c in run.cut_off:  # a GPU whose command printed no result: never measured, never left out
        who = f"GPU{c.gpu}" if c.gpu is not None else f"line {c.line}"
        named = ", ".join(x for x in (f"-d {c.gpu}" if c.gpu is not None else "", c.target or "") if x)
        out.append(ProbeVerdict(who, "run", False, f"cut off: the gdsio command on output line {c.line} ({named}) "
                                "printed no result line: never measured", "no result", "a result line"))
    host = [r for r in run.results if not r.direct]
    first: dict[tuple[int, str, str, str | None], Result] = {}
    for r in run.results:
        same_run = (r.gpu, r.io.upper(), r.xfer, r.target) if r.gpu is not None else None
        if same_run is not None and same_run in first:
            was = first[same_run].line
            out.append(ProbeVerdict(subject(r), "measured twice", False, f"{r.io} {r.xfer}"
                                    + (f" on {r.target}" if r.target else "") + f" of GPU{r.gpu} on output lines "
                                    f"{was} and {r.line}: one GPU's result standing in for another's, or a doubled "
                                    "capture", f"lines {was}, {r.line}", "once"))
            continue
        if same_run is not None:
            first[same_run] = r
        if not r.direct:
            continue
        # gdsio -V prints Avg_Latency 0 for a run it measured: no latency, not a 0 us one (it is never judged)
        latency = f"{r.latency_us:.0f} us average" if r.latency_us > 0 else "no latency reported (Avg_Latency 0)"
        shown = (f"{r.io} {r.xfer} {r.gibs:.2f} GiB/s, {r.threads} thread(s), {latency}"
                 + (f" on {r.target}" if r.target else "") + f" (output line {r.line})")
        same = [h for h in host if h.gpu == r.gpu and h.io == r.io and h.target == r.target]
        if same:
            shown += f"; through host memory {same[0].xfer} {same[0].gibs:.2f} GiB/s"
        key = _KEY.get(r.io.upper())
        floor = expect.get(key) if key else None
        if floor is None:
            out.append(not_judged(subject(r), f"{r.io.lower()} GPUDirect", f"no floor given (--expect "
                                  f"{key or 'gdsio_read_min'}=N GiB/s per GPU, from the drives' or the storage "
                                  f"network's rate); {shown}", r.gibs))
        else:
            out.append(ProbeVerdict(subject(r), f"{r.io.lower()} GPUDirect", r.gibs >= float(floor),
                                    f"{shown}; floor {floor:g} GiB/s ({key})", r.gibs, f">= {floor:g}"))
    out += _unmeasured(run, expect.get("gpu_count"))
    if not any(r.direct for r in run.results):
        out.append(not_judged("gdsio", "GPUDirect", "no GPUDirect (XferType GPUD) result in the capture: only "
                              f"{', '.join(sorted({r.xfer for r in run.results}))}"))
    return out


def _unmeasured(run: Gdsio, per_node: object) -> list[ProbeVerdict]:
    """A GPU with no GPUDirect result in a direction others have one in: its command and result lines both
    gone read as a GPU never there. Which GPUs should have one: the platform's `gpu_count` (0..N-1), else
    those numbered 0.. up to the highest measured, when more than one was. A GPU cut off is failed already."""
    want = count_of(per_node)
    cut = {c.gpu for c in run.cut_off}
    out = []
    for io in sorted({r.io.upper() for r in run.results if r.direct and r.gpu is not None}):
        have = {r.gpu for r in run.results if r.direct and r.gpu is not None and r.io.upper() == io}
        top = want if want is not None else max(have) + 1 if len(have) > 1 else 0
        for gpu in (g for g in gaps(have, top) if g not in cut):
            out.append(ProbeVerdict(f"GPU{gpu}", f"{io.lower()} GPUDirect", False, f"no GPUDirect {io} result for "
                                    f"GPU{gpu} in the capture, while GPU {', '.join(map(str, sorted(have)))} "
                                    f"{'has' if len(have) == 1 else 'have'} one"
                                    + (f" (the platform has {want})" if want is not None else "")
                                    + ": never measured", "no result", "a result"))
    return out


PROBE = Probe(
    name="gdsio",
    description="NVIDIA gdsio: GPUDirect Storage throughput per GPU against the drives' or storage network's floor",
    input_help="gdsio output (IoType ... XferType ... Throughput lines, with the command lines naming -d where captured)",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("gdsio_read_min", "gdsio_write_min", "gpu_count"),
)
