"""`measure: gdsio`: NVIDIA GPUDirect Storage's gdsio per GPU on each node's first rank
(clustercheck/measure/native_io.py): a GPUDirect (-x 0) write, then a read of what it wrote, in the
directory $CLUSTERCHECK_GDS_DIR names on that node. Judged per GPU against `gdsio_write_min` and
`gdsio_read_min` (GiB/s) from the expectations: the rate the drives or the storage network behind the GPUs
deliver, which no shipped profile can know (docs/fabric.md, "Storage into the GPU", has the public
figures). Without a floor the GPUs are not judged (an error, never a pass); without gdsio or the
directory the check is skipped saying so. Ranks: clustercheck.measure.native_io:gdsio."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck import units
from clustercheck.errors import HarnessError, Skip, show
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.verdicts import Expectation, Verdict, of_limit
from clustercheck.kinds import params as shared
from clustercheck.kinds.base import Answers, CheckSpec, Kind, Rules
from clustercheck.kinds.native import BUILT_IN, tool_timeout, unclean_end
from clustercheck.schema import Fields, between, one_of
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import gdsio as reader

METRICS = {"read_gibs": "GiB/s", "write_gibs": "GiB/s"}
_IO = {"write": "1", "read": "0"}  # gdsio -I: 0 read, 1 write


def parse(f: Fields) -> dict[str, Any]:
    io = f.get("io", list, ["write", "read"])
    # the type first: `[write] in _IO` hashes a list, a TypeError
    if not io or any(not isinstance(x, str) or x not in _IO for x in io) or len(set(io)) != len(io):
        raise f.error("io", f"expected a list of write and/or read, e.g. [write, read], got {show(io)}")
    size, io_size = shared.size(f, "size", "8GiB"), shared.size(f, "io_size", "1MiB")
    if size % (1 << 20):  # gdsio -s takes whole MiB here: 1000KiB would run as -s 0M
        raise f.error("size", f"gdsio takes a file size of whole MiB, got {units.format_size(size)}")
    if io_size % (1 << 10) or io_size > size:  # -i in whole KiB, within the file
        raise f.error("io_size", f"gdsio takes an I/O size of whole KiB up to the file size "
                                 f"({units.format_size(size)}), got {units.format_size(io_size)}")
    params = {"io": [x for x in ("write", "read") if x in io],  # a read reads what the write made
              "size": size,
              "io_size": io_size,
              "threads": f.get("threads", int, 8, check=between(1, 256)),
              "duration": f.get("duration", int, 10, check=between(1, 3600)),
              "gpus": f.get("gpus", int, None, check=between(1, 64)),
              "xfer": f.get("xfer", str, "gpud", check=one_of("gpud"))}
    f.done()
    return params


def fits(params: Mapping[str, Any], timeout: float) -> tuple[str, str] | None:
    """The rank runs gdsio for each I/O on each GPU in turn, each within its share of the tool's timeout
    (measure/native_io.py); the GPUs are counted on the node when `gpus` is not given: one at the least."""
    runs, share = len(params["io"]) * (params["gpus"] or 1), tool_timeout(timeout)
    if params["duration"] * runs >= share:
        where = f"on {params['gpus']} GPU(s)" if params["gpus"] else "on one GPU, and as many more as the node has"
        return "duration", (f"{params['duration']} s does not fit timeout {timeout:g} s: {runs} gdsio run(s) "
                            f"({', '.join(params['io'])} {where}) within {share:g} s of it for the tool")
    return None


def argv(params: Mapping[str, Any], directory: str, gpu: int, io: str) -> list[str]:
    """gdsio's flags (NVIDIA GDS benchmarking guide): -D dir, -d GPU, -w threads, -s file size, -i IO size,
    -x 0 (GPUDirect), -I 0 read / 1 write, -T seconds."""
    return ["gdsio", "-D", directory, "-d", str(gpu), "-w", str(params["threads"]), "-s", f"{params['size'] >> 20}M",
            "-i", f"{params['io_size'] >> 10}K", "-x", "0", "-I", _IO[io], "-T", str(params["duration"])]


def task_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return {**check.params, "tool_timeout": tool_timeout(check.timeout)}


def reads(check: CheckSpec) -> tuple[str, ...]:
    """The floors judge() looks up: one per direction the check runs."""
    return tuple(f"gdsio_{io}_min" for io in check.params["io"])


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    result = next((r for r in a.per_rank if r.get("binary")), None)
    if result is None:
        raise HarnessError(f"{a.check.id}: no rank of {', '.join(sorted(set(a.hosts)))} ran gdsio")
    if result["outcome"] == "missing":
        raise Skip(result["reason"])
    if result["outcome"] != "ran":
        raise HarnessError(result["reason"])
    for run in result["runs"]:  # a gpu of True counted as GPU1 (True == 1) and stood in for it, never run
        if not units.is_count(run.get("gpu")) or run["gpu"] < 0:
            raise HarnessError(f"gdsio on {result['host']}: a run answered gpu {show(run.get('gpu'), 40)}, no GPU "
                               f"index: which GPU it measured cannot be told, not judged")
    subjects: dict[str, dict[str, float]] = {}
    verdicts: list[Verdict] = _unmeasured(a, result["runs"], _gpu_count(a, result))
    open_: list[str] = []
    seen: set[tuple[int, str]] = set()
    for run in result["runs"]:
        subject, metric = f"GPU{run['gpu']}", f"{run['io']}_gibs"
        if (run["gpu"], run["io"]) in seen:
            continue  # failed by _unmeasured: a second result never replaces (or stands in for) the first
        seen.add((run["gpu"], run["io"]))
        if run["outcome"] != "ran":
            raise HarnessError(f"gdsio on {result['host']} ({subject}): {run['reason']}")
        try:
            parsed = reader.parse(run["stdout"])
        except NotToolOutput as exc:
            raise HarnessError(f"gdsio on {result['host']} ({subject}, {run['io']}) ended with exit status "
                               f"{run['returncode']} without a result line ({exc})") from None
        # a returncode of None or False (no exit status read) was no problem: never a clean exit (native.py)
        problem = parsed.failure or unclean_end(run)
        if problem:
            rule = Expectation(a.check.id, "run", "a complete run", BUILT_IN, "a result line, no error, exit status 0")
            verdicts.append(Verdict("run", "failed", "", rule, False, subject=subject, detail=problem))
        direct = [r for r in parsed.results if r.direct]
        if not direct:
            if not problem:  # it ran, through the CPU: this GPU never reached storage directly, never left out
                moved = ", ".join(sorted({r.xfer for r in parsed.results})) or "none"
                rule = Expectation(a.check.id, "transfer", "GPUD", BUILT_IN, "a GPUDirect transfer (XferType GPUD)")
                verdicts.append(Verdict("transfer", moved, "", rule, False, subject=subject,
                                        detail=f"{run['io']}: XferType {moved}, no GPUDirect transfer"))
            continue
        value = min(r.gibs for r in direct)
        subjects.setdefault(subject, {})[metric] = value
        key = f"gdsio_{run['io']}_min"
        floor = rules.expect.get(key)
        if floor is None:
            open_.append(f"{subject} {run['io']} {value:.2f} GiB/s")
            continue
        limit = Limit(a.check.id, metric, ">=", float(floor), "GiB/s", f">= {float(floor):g}",
                      f"the expectation {key}: the drives' or the storage network's rate", rules.expect_origin)
        verdicts.append(of_limit(metric, value, limit, subject=subject))
    if open_:
        raise HarnessError(f"gdsio on {result['host']}: not judged: no floor given (--expect gdsio_write_min=N "
                           f"gdsio_read_min=N GiB/s per GPU, or a profile's expect:); measured {'; '.join(open_)}")
    if not verdicts:
        raise HarnessError(f"gdsio on {result['host']}: no GPUDirect result")
    rows = [{"subject": s, "metric": k, "median": v, "min": v, "max": v} for s, m in subjects.items() for k, v in m.items()]
    return Measurement(metrics={}, units=dict(METRICS), rows=rows, subjects=subjects), verdicts


def _gpu_count(a: Answers, result: Mapping[str, Any]) -> int:
    """The GPUs the node's rank was to run: the check's `gpus`, else the count the rank ran for (it counts
    the node's GPUs, measure/native_io.py). Never the highest GPU seen: the node's last GPU, never run, would
    go unnoticed. A rank that did not say is the harness's error, naming its host."""
    gpus = a.check.params.get("gpus") or result.get("gpus")
    if not units.is_count(gpus) or gpus < 0:
        raise HarnessError(f"gdsio on {result.get('host')}: the rank did not say how many GPUs it ran gdsio for "
                           f"(gpus: {gpus!r}): which GPUs went unmeasured cannot be told")
    return gpus


def _unmeasured(a: Answers, runs: list[dict[str, Any]], gpus: int) -> list[Verdict]:
    """A GPU and direction the rank ran twice, or never (a GPU of the count `gpus` without a run; a GPU run
    in one direction of `io` only): failed by name ("no gdsio run of GPU3"), never a pass."""
    out = []
    rule = Expectation(a.check.id, "run", "one run per GPU and direction", BUILT_IN,
                       "one gdsio result per GPU and direction the check asks for")
    count: dict[tuple[int, str], int] = {}
    for run in runs:
        count[(run["gpu"], run["io"])] = count.get((run["gpu"], run["io"]), 0) + 1
    for (gpu, io), k in count.items():
        if k > 1:
            out.append(Verdict("run", f"{k} runs", "", rule, False, subject=f"GPU{gpu}",
                               detail=f"{io}: {k} runs of GPU{gpu} in the answer: one GPU measured twice"))
    for gpu in range(gpus):
        for io in a.check.params.get("io") or sorted({io for _, io in count}):
            if (gpu, io) not in count:
                out.append(Verdict("run", "no run", "", rule, False, subject=f"GPU{gpu}",
                                   detail=f"{io}: no gdsio run of GPU{gpu} in the answer: never measured"))
    return out


PROVIDES = (Kind("gdsio", ("node",), METRICS, parse,
                 "NVIDIA gdsio per GPU on each node's first rank: GPUDirect Storage write and read throughput in "
                 "$CLUSTERCHECK_GDS_DIR, judged against gdsio_write_min / gdsio_read_min", "clustercheck.measure.native_io:gdsio",
                 judge, gpu_only=True, limited=False, task_params=task_params, skips_on_answers=True,
                 fits=fits, expect_keys=("gdsio_write_min", "gdsio_read_min"), expect_keys_of=reads),)
