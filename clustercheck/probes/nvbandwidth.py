"""Judge an nvbandwidth run offline: `clustercheck probe nvbandwidth --input FILE [--platform P]`.

Fails: a run that failed or stopped (the data-pattern check, `ASSERT`, CUDA errors, `Aborted`, an
`Error:` status, a test that printed nothing, a cell or SUM that is nan, inf, below 0 or does not read, a
SUM line of another test or printed twice, a testcase printed twice, a matrix without the SUM line the
output prints), a matrix that is not whole (a row or column label missing or listed twice, a GPU-pair matrix that is not square, fewer or
more GPU columns than the `Device` lines or the platform's `gpu_count`, a SUM the cells do not add up to,
a SUM or an off-diagonal cell of 0.00 or N/A: nothing was measured), and cells below the platform's floors:
`h2d_min` per GPU in host_to_device_memcpy_{ce,sm}, `d2h_min` in device_to_host_memcpy_{ce,sm}, `p2p_min`
per ordered GPU pair in device_to_device_memcpy_{read,write}_{ce,sm} (an N/A pair there fails: no peer
access), and `p2p_uniformity`: every pair of those matrices within this fraction of the matrix median (0.10
= +-10%, as Azure's check_gpu_bw gates every pair: Azure/azurehpc-health-checks customTests; an N/A pair
fails it). Each
testcase's verdict prints what was read: its SUM and the min, median and max of its matrix. A floor whose
tests are not in the capture, and every floor of output cut down to the SUM lines, is `not judged`, never
passed; a capture with no testcase at all judged nothing (exit 5).
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, count_of, gaps, not_judged
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
    out = [_run_verdict(run)]
    if not run.testcases:
        return out
    model = expect.get("gpu_model")
    if model and run.devices:
        names = sorted({d.name for d in run.devices})
        out.append(ProbeVerdict("node", "GPU model", all(str(model) in n for n in names),
                                f"{', '.join(names)}; platform expects {model}", ", ".join(names), model))
    out += matrix_verdicts(run, count_of(expect.get("gpu_count")))
    for key, tests in FLOORS.items():
        floor = expect.get(key)
        if floor is None:
            continue
        cases = [c for c in (_matrix(run, name) for name in tests) if c is not None]
        out += [_floor_verdict(case, key, float(floor)) for case in cases] or [_absent(run, key, tests)]
    spread = expect.get("p2p_uniformity")
    if spread is not None:
        cases = [c for c in (_matrix(run, name) for name in _P2P) if c is not None]
        out += [_uniformity_verdict(case, float(spread)) for case in cases] or [_absent(run, "p2p_uniformity", _P2P)]
    return out


def _absent(run: NvbandwidthRun, key: str, tests: tuple[str, ...]) -> ProbeVerdict:
    """A floor the platform sets and this capture has no matrix for: named, never passed."""
    sums = [t for t in tests if run.testcase(t) is not None]
    why = (f"{', '.join(sums)} {'has only its SUM line' if len(sums) == 1 else 'have only SUM lines'} here, not "
           f"the per-GPU values {key} judges" if sums else
           f"none of {', '.join(tests)} is in this capture")
    return not_judged("nvbandwidth", key, why)


def matrix_verdicts(run: NvbandwidthRun, gpu_count: int | None = None) -> list[ProbeVerdict]:
    """One verdict per testcase, shared by the probe and `measure: nvbandwidth`: what was read (its SUM and
    the min, median and max of its matrix), failing a matrix that is not whole or not a measurement: a row or
    column missing or listed twice, a GPU-pair matrix that is not square, GPU columns other than the `Device`
    lines (or the platform's `gpu_count`) list, a SUM its cells do not add up to, a SUM or an off-diagonal
    cell of 0.00, or an off-diagonal GPU pair of N/A (never measured; the diagonal's N/A is by design)."""
    out = []
    devices = len({(d.host, d.index) for d in run.devices}) or None
    for case in run.testcases:
        problems = _shape(case, devices, gpu_count) if case.rows else []
        if case.sum is not None and case.sum == 0:
            problems.append(f"SUM {case.name} 0.00: nothing was measured")
        cells = [(what, v) for what, v in case.subjects()]
        zero = [what for what, v in cells if v == 0]
        if zero:
            problems.append(f"{len(zero)} cell(s) at 0.00, nothing measured: {_listed(zero)}")
        # a GPU pair off the diagonal that printed N/A was never measured (no peer access, or a cut-off run);
        # the diagonal (a GPU to itself) is N/A by design and is not among the subjects
        unmeasured = [what for what, v in cells if v is None] if case.peer_to_peer else []
        if unmeasured:
            problems.append(f"{len(unmeasured)} GPU pair(s) N/A, not measured: {_listed(unmeasured)}")
        total = case.computed_sum
        if case.sum is not None and total is not None and abs(case.sum - total) > 0.005 * len(case.cells()) + 0.011:
            problems.append(f"SUM {case.sum:.2f} but the cells add up to {total:.2f}: a cell is missing or edited")
        detail = _figures(case)
        if problems:
            out.append(ProbeVerdict(case.name, "matrix", False, "; ".join(problems) + f" ({detail})", case.sum))
        else:
            out.append(ProbeVerdict(case.name, "matrix", True, detail, case.sum))
    return out


def _figures(case: Testcase) -> str:
    """`SUM host_to_device_memcpy_ce 208.05 GB/s; 8 cells: min 25.94 (GPU1), median 25.99, max 26.19 (GPU4)`."""
    parts = [f"SUM {case.name} {case.sum:.2f} {case.unit}" if case.sum is not None else f"no SUM line for {case.name}"]
    cells = case.subjects()
    measured = sorted((v, what) for what, v in cells if v is not None)
    if measured:
        median = statistics.median(v for v, _ in measured)
        na = len(cells) - len(measured)
        parts.append(f"{len(cells)} cell(s){f' ({na} N/A)' if na else ''}: min {measured[0][0]:.2f} ({measured[0][1]}), "
                     f"median {median:.2f}, max {measured[-1][0]:.2f} ({measured[-1][1]}) {case.unit}")
    elif cells:
        parts.append(f"{len(cells)} cell(s), all N/A")
    elif case.rows == ():
        parts.append("SUM line only: no matrix in this capture")
    return "; ".join(parts)


def _labels(labels: tuple[str, ...], what: str) -> list[str]:
    """A row or column label listed twice, or missing from 0..n-1 (nvbandwidth numbers them from 0)."""
    problems = []
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    twice = [label for label, k in seen.items() if k > 1]
    if twice:
        problems.append(f"{what} {_listed(twice)} listed twice")
    numbers = {int(label) for label in seen if label.isascii() and label.isdigit() and len(label) <= 6}
    if len(numbers) == len(seen):
        gone = [str(n) for n in gaps(numbers, max(numbers, default=-1) + 1)]
        if gone:
            problems.append(f"{what} {_listed(gone)} missing")
    return problems


def _shape(case: Testcase, devices: int | None, gpu_count: int | None) -> list[str]:
    rows = tuple(label for label, _ in case.rows)
    problems = _labels(rows, "row") + _labels(case.columns, "column")
    gpu_columns = "GPU(column)" in (case.title or "")
    if case.peer_to_peer and len(rows) != len(case.columns):
        problems.append(f"a GPU-pair matrix of {len(rows)} rows and {len(case.columns)} columns: not square")
    for promised, by in ((devices, "Device lines"), (gpu_count, "platform's gpu_count")):
        if gpu_columns and promised is not None and len(case.columns) != promised:
            problems.append(f"{len(case.columns)} GPU column(s), the {by} say {promised}")
    return problems


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


def _run_verdict(run: NvbandwidthRun) -> ProbeVerdict:
    if run.failure:
        return ProbeVerdict("nvbandwidth", "run", False, f"failed: {run.failure}", run.failure, "every test finished")
    if not run.testcases:
        return not_judged("nvbandwidth", "run", f"no testcase result in this capture (no matrix, no SUM line): "
                          f"{summary(run)}")
    return ProbeVerdict("nvbandwidth", "run", True, summary(run), len(run.testcases))


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more


def _floor_verdict(case: Testcase, key: str, floor: float) -> ProbeVerdict:
    cells = case.subjects()
    # the parser keeps no nan or inf; a cell that is one anyway is not measured, never "not below the floor"
    missing = [what for what, v in cells if v is None or not math.isfinite(v)]
    low = sorted(((v, what) for what, v in cells if v is not None and math.isfinite(v) and v < floor))
    measured = [v for _, v in cells if v is not None and math.isfinite(v)]
    lowest = min(measured) if measured else None
    if missing or low or not measured:
        bad = [f"{what} {v:.2f}" for v, what in low] + [f"{what} N/A (not measured)" for what in missing]
        detail = f"{len(bad)} of {len(cells)} below {floor:g} {case.unit}: {_listed(bad)}"
        return ProbeVerdict(case.name, key, False, detail, lowest, f">= {floor:g}")
    worst = min((v, what) for what, v in cells if v is not None and math.isfinite(v))
    return ProbeVerdict(case.name, key, True, f"{len(cells)} value(s) >= {floor:g} {case.unit}; lowest "
                        f"{worst[0]:.2f} ({worst[1]})", lowest, f">= {floor:g}")


def _uniformity_verdict(case: Testcase, spread: float) -> ProbeVerdict:
    cells = [(what, v) for what, v in case.subjects() if v is not None and math.isfinite(v)]
    # a pair never measured is not within any spread of the median: named, never passed (nor left out)
    missing = [f"{what} N/A (not measured)" for what, v in case.subjects() if v is None or not math.isfinite(v)]
    if len(cells) < 2 and not missing:
        return not_judged(case.name, "p2p_uniformity", f"{len(cells)} measured pair(s): nothing to compare")
    median = statistics.median(v for _, v in cells) if cells else math.nan
    signed = [((v - median) / median if median else float("inf"), what, v) for what, v in cells]
    off = sorted(((abs(d), what, v, d) for d, what, v in signed), reverse=True)
    bad = [f"{what} {v:.2f} ({d:+.1%})" for dev, what, v, d in off if dev > spread]
    if bad or missing:
        parts = [f"{len(bad)} of {len(cells)} pair(s) more than {spread:.0%} from the median "
                 f"{median:.2f} {case.unit}: {_listed(bad)}"] if bad else []
        if missing:
            parts.append(f"{len(missing)} of {len(cells) + len(missing)} pair(s) not measured: {_listed(missing)}")
        return ProbeVerdict(case.name, "p2p_uniformity", False, "; ".join(parts), off[0][0] if off else None, spread)
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
    expect_keys=("h2d_min", "d2h_min", "p2p_min", "p2p_uniformity", "gpu_model", "gpu_count"),
)
