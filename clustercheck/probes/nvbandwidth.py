"""Judge an nvbandwidth run offline: `clustercheck probe nvbandwidth --input FILE [--platform P]`.

Fails: a run that failed or stopped (the data-pattern check, `ASSERT`, CUDA errors, `Aborted`, an
`Error:` status, a test that printed nothing), and cells below the platform's floors: `h2d_min` per GPU
in host_to_device_memcpy_{ce,sm}, `d2h_min` in device_to_host_memcpy_{ce,sm}, `p2p_min` per ordered GPU
pair in device_to_device_memcpy_{read,write}_{ce,sm} (an N/A pair there fails: no peer access), and
`p2p_uniformity`: every pair of those matrices within this fraction of the matrix median (0.10 = +-10%,
as Azure's check_gpu_bw gates every pair: Azure/azurehpc-health-checks customTests). Floors whose tests are not in the capture are named, not judged; output cut
down to the SUM lines has no per-GPU values to judge.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import nvbandwidth as reader
from clustercheck.toolout.nvbandwidth_run import NvbandwidthRun, Testcase

_P2P = tuple(f"device_to_device_memcpy_{d}_{e}" for d in ("read", "write") for e in ("ce", "sm"))
FLOORS: dict[str, tuple[str, ...]] = {
    "h2d_min": ("host_to_device_memcpy_ce", "host_to_device_memcpy_sm"),
    "d2h_min": ("device_to_host_memcpy_ce", "device_to_host_memcpy_sm"),
    "p2p_min": _P2P,
}
_SHOWN = 8  # cells named one by one in a verdict; more are counted


def parse(text: str) -> NvbandwidthRun:
    try:
        return reader.parse(text)
    except NotToolOutput as exc:
        raise ProbeParseError(str(exc)) from None


def collect() -> str:
    raise ProbeSkip("this probe judges captured output: give --input FILE (nvbandwidth text or -j JSON); a suite "
                    "runs the binary with `measure: nvbandwidth`")


def judge(run: NvbandwidthRun, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    absent = [key for key in (*FLOORS, "p2p_uniformity") if expect.get(key) is not None
              and not any(_matrix(run, name) for name in FLOORS.get(key, _P2P))]
    out = [_run_verdict(run, absent)]
    model = expect.get("gpu_model")
    if model and run.devices:
        names = sorted({d.name for d in run.devices})
        out.append(ProbeVerdict("node", "GPU model", all(str(model) in n for n in names),
                                f"{', '.join(names)}; platform expects {model}", ", ".join(names), model))
    for key, tests in FLOORS.items():
        floor = expect.get(key)
        if floor is None:
            continue
        for name in tests:
            case = _matrix(run, name)
            if case is not None:
                out.append(_floor_verdict(case, key, float(floor)))
    spread = expect.get("p2p_uniformity")
    if spread is not None:
        for name in _P2P:
            case = _matrix(run, name)
            if case is not None:
                out.append(_uniformity_verdict(case, float(spread)))
    return out


def _matrix(run: NvbandwidthRun, name: str) -> Testcase | None:
    case = run.testcase(name)
    return case if case is not None and case.rows else None


def summary(run: NvbandwidthRun) -> str:
    """What the output holds, in one line: results, matrices, waived tests, version, devices, notes."""
    with_matrix = sum(1 for t in run.testcases if t.rows)
    parts = [f"{len(run.testcases)} result(s), {with_matrix} with a matrix, {run.waived} waived"]
    if run.version:
        parts.append(f"nvbandwidth {run.version}")
    if run.devices:
        parts.append(f"{len(run.devices)} device(s): {', '.join(sorted({d.name for d in run.devices}))}")
    if run.format == "sum-only":
        parts.append("SUM lines only: per-GPU values are not in this output")
    if run.notes:
        parts.append(f"{len(run.notes)} note(s): {run.notes[0]}")
    return "; ".join(parts)


def _run_verdict(run: NvbandwidthRun, absent: list[str]) -> ProbeVerdict:
    if run.failure:
        return ProbeVerdict("nvbandwidth", "run", False, f"failed: {run.failure}", run.failure, "every test finished")
    detail = summary(run) + (f"; not in this capture, so not judged: {', '.join(absent)}" if absent else "")
    return ProbeVerdict("nvbandwidth", "run", True, detail, len(run.testcases))


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _floor_verdict(case: Testcase, key: str, floor: float) -> ProbeVerdict:
    cells = case.subjects()
    missing = [what for what, v in cells if v is None]
    low = sorted(((v, what) for what, v in cells if v is not None and v < floor))
    measured = [v for _, v in cells if v is not None]
    lowest = min(measured) if measured else None
    if missing or low or not measured:
        bad = [f"{what} {v:.2f}" for v, what in low] + [f"{what} N/A (not measured)" for what in missing]
        detail = f"{len(bad)} of {len(cells)} below {floor:g} {case.unit}: {_listed(bad)}"
        return ProbeVerdict(case.name, key, False, detail, lowest, f">= {floor:g}")
    worst = min((v, what) for what, v in cells if v is not None)
    return ProbeVerdict(case.name, key, True, f"{len(cells)} value(s) >= {floor:g} {case.unit}; lowest "
                        f"{worst[0]:.2f} ({worst[1]})", lowest, f">= {floor:g}")


def _uniformity_verdict(case: Testcase, spread: float) -> ProbeVerdict:
    cells = [(what, v) for what, v in case.subjects() if v is not None]
    if len(cells) < 2:
        return ProbeVerdict(case.name, "p2p_uniformity", True, f"{len(cells)} measured pair(s): nothing to compare")
    median = statistics.median(v for _, v in cells)
    signed = [((v - median) / median if median else float("inf"), what, v) for what, v in cells]
    off = sorted(((abs(d), what, v, d) for d, what, v in signed), reverse=True)
    bad = [f"{what} {v:.2f} ({d:+.1%})" for dev, what, v, d in off if dev > spread]
    if bad:
        return ProbeVerdict(case.name, "p2p_uniformity", False, f"{len(bad)} of {len(cells)} pair(s) more than "
                            f"{spread:.0%} from the median {median:.2f} {case.unit}: {_listed(bad)}", off[0][0], spread)
    return ProbeVerdict(case.name, "p2p_uniformity", True, f"{len(cells)} pairs within {spread:.0%} of the median "
                        f"{median:.2f} {case.unit} (worst {off[0][1]} {off[0][0]:.1%})", off[0][0], spread)


PROBE = Probe(
    name="nvbandwidth",
    description="an nvbandwidth run: failures, per-GPU H2D/D2H and per-pair P2P floors, P2P uniformity",
    input_help="nvbandwidth output (text, SUM lines, or -j JSON)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("h2d_min", "d2h_min", "p2p_min", "p2p_uniformity", "gpu_model"),
)
