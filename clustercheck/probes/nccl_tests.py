"""Judge an nccl-tests / rccl-tests log offline: `clustercheck probe nccl-tests --input FILE [--platform P]`.

Fails: a run that crashed or stops early (its failure line), a table row whose numbers are not numbers
(nan, inf, 1e400) or out of their domain (a negative time, bandwidth or `#wrong`; a time, algbw and busbw
that cannot be one measurement: toolout/nccl_measured.py), any `#wrong` > 0 (size and count per placement),
rows against the header's sizes (a size missing, listed twice or out of order: nccl_tests_rows.py), an `Out of bounds values` count > 0, the tool's own `Avg bus bandwidth ...
FAILED`, NCCL's own errors (each NCCL WARN or error-return trace in the text, per host; nccl-tests' `# error:`
line after its footer or the JSON's `errors`), a busbw below the floor at the largest size, Rank lines naming
another GPU than the platform's `gpu_model`, and Rank lines that disagree with themselves, with the header or with the platform: a rank
number twice or missing, another count than the rows' busbw/algbw gives, a GPU of a host listed twice, a
process with fewer or more ranks than its header's `nThread x nGpus`, or a host with another number of GPUs than the platform's `gpu_count`.
`#wrong` = N/A (validation off, `-c 0`) is `not judged` (the data was not checked), never passed, and so is
one N/A among checked results of its column while the header says `validation: 1`. A capture of
one rank moved no data between GPUs: its busbw is not judged (`not judged: ...`), never passed.

Floors: `busbw_min` (GB/s; a number, or one per collective as the binary names it: {all_reduce: 430})
is judged against the worse of the out-of-place and in-place busbw of the largest size; without one (or
without one for the collective the capture ran), or when that size's row was not read (unreadable, or the
table stops below the header's last size), the busbw is not judged, never passed. A profile's
`busbw_min` is one node's NVLink floor; a multi-node run is bounded by the network, so for a capture whose
Rank lines name more than one host (or, without Rank lines, whose rank count from busbw/algbw exceeds the
profile's `gpu_count`) the fabric floor applies instead, never the NVLink one: `busbw_min_multinode` when
given, else the fabric rule (judging/fabric.py: a fraction of `--expect fabric_gbps` or the profile's
fabric line rate, at a size on the plateau); without a line rate the busbw is not judged, and so it is
when the capture's own NCCL INFO lines show a host on NCCL's TCP socket fallback (`Using network Socket`,
`via NET/Socket/0`): that busbw is the sockets', not the fabric's. A capture whose
node count cannot be told is judged as one node. `nodes` and `gpu_count` check the capture's hosts x
ranks against what was expected.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from collections import Counter
from typing import Any, Mapping

from clustercheck import units
from clustercheck.errors import UserError
from clustercheck.fabric import nccl_net, transport
from clustercheck.judging import fabric
from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, count_of, gaps, not_judged
from clustercheck.probes.nccl_tests_rows import largest_promised, rows_verdict
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import nccl_tests as reader
from clustercheck.toolout.nccl_run import NCCL_TESTS_COLLECTIVES
from clustercheck.toolout.nccl_tests import NcclTestsRun

COLLECTIVES = NCCL_TESTS_COLLECTIVES


@dataclass(frozen=True)
class NcclCapture(NcclTestsRun):
    """A capture as this probe read it: the run, and where its own NCCL INFO lines say a host's network was
    NCCL's TCP socket fallback ((host, line number, line), fabric/nccl_net.py's reader): a busbw measured over
    sockets says nothing of the RDMA fabric, so no fabric floor is judged on it."""

    socket: tuple[tuple[str, int, str], ...] = ()


def parse(text: str) -> NcclTestsRun:
    try:
        run = reader.parse(text)
    except NotToolOutput as exc:
        raise ProbeParseError(str(exc)) from None
    return NcclCapture(**{f.name: getattr(run, f.name) for f in dataclasses.fields(run)}, socket=_socket(text))


def _socket(text: str) -> tuple[tuple[str, int, str], ...]:
    """Each host whose NCCL lines name Socket as its network (`Using network Socket`, a channel `via
    NET/Socket/0`), with the first line that says so."""
    hosts = nccl_net.read(text)[1]
    lines = list(enumerate(text.splitlines(), 1))
    return tuple((host or "?", *next(((n, l.strip()[:160]) for n, l in lines if host in l and (
        "Using network Socket" in l or "via NET/Socket/" in l)), (0, ""))) for host, net in hosts.items()
        if "Socket" in net.networks or "Socket" in net.nets_used)


def collect() -> str:
    raise ProbeSkip("this probe judges a captured log: give --input FILE (all_reduce_perf or another *_perf "
                    "output, text or -J JSON); a suite runs the binary with `measure: nccl_tests`")


def judge(run: NcclTestsRun, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    subject = tool_name(run)
    out = [run_verdict(run, subject)]
    out += data_verdicts(run, subject)
    out += rank_verdicts(run, subject, count_of(expect.get("gpu_count")))
    model = expect.get("gpu_model")
    if model and run.gpu_models:
        wrong = [m for m in run.gpu_models if str(model) not in m]
        out.append(ProbeVerdict(subject, "GPU model", not wrong, f"{', '.join(run.gpu_models)} in the Rank lines; "
                                f"platform expects {model}", ", ".join(run.gpu_models), model))
    if run.nranks == 1 and run.rows:
        # nccl-tests' bus factor over one rank is 0 (2(n-1)/n, (n-1)/n): nothing crossed a link, so no floor
        # can be met or missed, and "busbw 0.00" must not read as a pass
        out.append(not_judged(subject, "busbw", "one rank moved no data between GPUs (busbw is 0 by nccl-tests' "
                              "definition over one rank): run it over 2 GPUs or more to judge the bandwidth"))
        return out
    for extra in (layout_verdict(run, subject, expect), _busbw_verdict(run, subject, expect)):
        if extra is not None:
            out.append(extra)
    return out


_SHOWN = 8


def _some(items: list[str]) -> str:
    return ", ".join(items[:_SHOWN]) + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def rank_verdicts(run: NcclTestsRun, subject: str, per_node: int | None = None) -> list[ProbeVerdict]:
    """The `#  Rank` lines counted, as offline (`probe nccl-tests`, which passes the platform's `gpu_count`)
    so in a run (`measure: nccl_tests`): every rank number from 0 up once, every GPU of a host once, each
    process with the `nThread x nGpus` ranks its header line promises, and, given `per_node`, that many GPUs
    on every host. A table without Rank lines has nothing to count (no verdict)."""
    if not run.ranks:
        return []
    problems: list[str] = []
    numbers = Counter(r.rank for r in run.ranks)
    twice = sorted(n for n, k in numbers.items() if k > 1)
    if twice:
        problems.append(f"rank {_some([str(n) for n in twice])} listed twice")
    top = max(numbers)
    if top + 1 > len(numbers):
        missing = [str(n) for n in gaps(numbers, top)]
        problems.append(f"rank {_some(missing)} missing (Rank lines up to rank {top}, {len(numbers)} distinct)")
    per_host: dict[str | None, Counter[int]] = {}
    for r in run.ranks:
        per_host.setdefault(r.host, Counter())[r.device] += 1
    for host, devices in per_host.items():
        where = f" on {host}" if host else ""
        dup = sorted(d for d, k in devices.items() if k > 1)
        if dup:
            problems.append(f"device {_some([str(d) for d in dup])}{where} used by more than one rank")
        if per_node is not None and sum(devices.values()) != per_node:
            gone = [str(d) for d in range(per_node) if d not in devices]
            miss = f" (no rank on device {_some(gone)})" if gone and sum(devices.values()) < per_node else ""
            problems.append(f"{sum(devices.values())} rank(s){where}, the platform has {per_node} GPUs per node{miss}")
    if run.n_threads and run.n_gpus and all(r.pid is not None for r in run.ranks):
        want = run.n_threads * run.n_gpus
        per_pid = Counter((r.host, r.pid) for r in run.ranks)
        odd = [f"pid {pid}{f' on {host}' if host else ''} has {k}" for (host, pid), k in per_pid.items() if k != want]
        if odd:
            problems.append(f"the header says nThread {run.n_threads} nGpus {run.n_gpus} ({want} rank(s) per "
                            f"process) and {_some(odd)}")
    problems += _ratio_disagrees(run)
    hosts = f" on {len(per_host)} host(s)" if any(per_host) else ""
    if problems:
        return [ProbeVerdict(subject, "Rank lines", False, f"{len(run.ranks)} Rank line(s){hosts}: "
                             + "; ".join(problems), len(run.ranks), per_node)]
    expected = f", {per_node} per host as the platform has" if per_node is not None else ""
    return [ProbeVerdict(subject, "Rank lines", True, f"{len(run.ranks)} rank(s) 0..{top}{hosts}, each GPU once"
                         + expected, len(run.ranks), per_node)]


def _ratio_disagrees(run: NcclTestsRun) -> list[str]:
    """The rank count busbw/algbw gives (busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather ...)
    against the Rank lines: a capture missing its last Rank line counts 0..n-2 without a gap."""
    told = reader.inferred_ranks(dataclasses.replace(run, ranks=()))
    if told is None or told == len(run.ranks):
        return []
    best = max((p for r in run.rows for _, p in r.placements()), key=lambda p: p.algbw)
    return [f"busbw/algbw {best.busbw:g}/{best.algbw:g} = {best.busbw / best.algbw:.4g} says {told} ranks "
            f"({run.collective}), the Rank lines list {len(run.ranks)}: a Rank line is missing or added"]


def tool_name(run: NcclTestsRun) -> str:
    """The subject of a run's own verdicts: the binary (all_reduce_perf), else the tool."""
    return f"{run.collective}_perf" if run.collective else run.tool


def summary(run: NcclTestsRun) -> str:
    """What ran, in one line: ranks, hosts, GPU models, NCCL version, sizes, the footer's figures."""
    hosts = f" on {len(run.hosts)} host(s)" if run.hosts else ""
    who = f"{run.nranks} ranks{hosts}" if run.nranks else "no Rank lines"
    models = f" ({', '.join(run.gpu_models)})" if run.gpu_models else ""
    version = f", NCCL {run.nccl_version}" if run.nccl_version else ""
    sizes = "no rows"
    if run.rows:
        sizes = f"{len(run.rows)} sizes {min(r.size for r in run.rows)}..{max(r.size for r in run.rows)} B"
    avg = f"; Avg bus bandwidth {run.avg_busbw:g}" if run.avg_busbw is not None else ""
    return f"{who}{models}{version}; {sizes}; Out of bounds values {run.out_of_bounds}{avg}"


def run_verdict(run: NcclTestsRun, subject: str) -> ProbeVerdict:
    if run.failure:
        return ProbeVerdict(subject, "run", False, f"{run.failure_kind}: {run.failure}", run.failure,
                            "a complete table and footer")
    return ProbeVerdict(subject, "run", True, summary(run), "complete")


def data_verdicts(run: NcclTestsRun, subject: str, asked: int | None = None) -> list[ProbeVerdict]:
    """The correctness of what the tool computed, judged the same way offline (`probe nccl-tests`) and in a
    run (`measure: nccl_tests`, which passes `asked`, the `-c` it gave): every `#wrong` > 0 per size and
    placement, the out-of-bounds count, the tool's own failed bandwidth check, and otherwise one verdict
    on the data as a whole. The verdicts whose rule is `== 0` carry expected 0."""
    out = []
    for row in run.rows:
        for name, p in row.placements():
            if p.wrong is not None and p.wrong > 0:
                place = name.replace("_", "-")
                out.append(ProbeVerdict(f"{row.size} B {place}", "wrong", False,
                                        f"{p.wrong:g} wrong elements at size {row.size} B {place} (output line "
                                        f"{row.line})", p.wrong, 0))
    for line, why in run.unread_rows[:_SHOWN]:  # a row nobody can read has no #wrong anyone checked
        out.append(ProbeVerdict(f"line {line}", "wrong", False, f"a table row {why}: its #wrong cannot be read",
                                "unreadable", 0))
    failed_rows = bool(out)
    out += _left_unchecked(run, asked)
    rows = rows_verdict(run, subject)
    if rows is not None:
        out.append(rows)
    if run.out_of_bounds is not None:
        ok = not run.out_of_bounds
        detail = "Out of bounds values : 0 OK" if ok else (
            f"Out of bounds values : {run.out_of_bounds} FAILED: {run.out_of_bounds} result(s) outside the tolerance")
        out.append(ProbeVerdict(subject, "out_of_bounds", ok, detail, run.out_of_bounds, 0))
    if run.avg_busbw_check == "FAILED":
        out.append(ProbeVerdict(subject, "Avg bus bandwidth", False, f"the tool's own check failed: Avg bus bandwidth "
                                f"{run.avg_busbw:g} FAILED (below 0.9 x NCCL_TESTS_MIN_BW / -c)", run.avg_busbw))
    # NCCL's own errors (its WARN lines in the text, nccl-tests' `# error:` line) fail whatever the table says
    out += [ProbeVerdict(f.subject, f.what, False, f.detail, f.measured, f.expected) for f in
            transport.error_findings(run.nccl_errors, subject, run.last_error)]
    if failed_rows or not run.rows:
        return out
    checked = [p for r in run.rows for _, p in r.placements() if p.checked]
    if not checked:
        if asked:
            out.append(ProbeVerdict(subject, "wrong", False, f"validation was asked for (-c {asked}) and the table "
                                    f"says N/A: not checked", "N/A", 0))
        else:
            out.append(not_judged(subject, "data check", "validation off (-c 0: #wrong/error N/A), the data was "
                                  "not checked, only speed was measured"))
    elif any(p.wrong is not None for p in checked):
        out.append(ProbeVerdict(subject, "wrong", True, f"#wrong 0 in {len(checked)} checked result(s)", 0, 0))
    else:
        worst = max(p.error for p in checked if p.error is not None)
        out.append(ProbeVerdict(subject, "data check", True, f"largest error {worst:g} in {len(checked)} checked "
                                f"result(s); Out of bounds values {run.out_of_bounds}", len(checked)))
    return out


def _left_unchecked(run: NcclTestsRun, asked: int | None) -> list[ProbeVerdict]:
    """With validation on (the header's `validation: 1`, or the `-c` a run gave), a result whose #wrong (or
    error) says N/A in a column the tool checked in other rows: nobody checked that result, so it is not
    judged offline, and fails a run that asked for the check. A column N/A throughout is the tool's own
    choice (nccl-tests 2.28 checks no in-place alltoall) and is judged as a whole below."""
    if not (asked or run.validation):
        return []
    columns: dict[str, list[tuple[int, int, bool]]] = {}
    for row in run.rows:
        for name, p in row.placements():
            columns.setdefault(name, []).append((row.size, row.line, p.checked))
    out = []
    for name, cells in columns.items():
        if not any(checked for _, _, checked in cells):
            continue
        place = name.replace("_", "-")
        for size, line, checked in cells:
            if checked:
                continue
            where = f"#wrong N/A at {size} B {place} (output line {line})"
            out.append(ProbeVerdict(f"{size} B {place}", "wrong", False, f"validation was asked for (-c {asked}) "
                                    f"and {where}: not checked", "N/A", 0) if asked else
                       not_judged(f"{size} B {place}", "wrong", f"{where} where the header says validation: "
                                  f"{run.validation} and the other results were checked", "N/A", 0))
    return out


def _floor(expect: Mapping[str, Any], key: str, collective: str | None) -> tuple[float | None, str]:
    raw = expect.get(key)
    if raw is None:
        return None, ""
    if isinstance(raw, dict):
        for name, value in raw.items():
            if name not in COLLECTIVES:
                raise UserError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}", key=f"expect.{key}")
            if not units.is_number(value):
                raise UserError(f"expected a number of GB/s, got {type(value).__name__}", key=f"expect.{key}.{name}")
        if collective is None:
            return None, f"{key} names collectives, and this capture does not say which collective it ran"
        if collective not in raw:
            return None, f"{key} has no floor for {collective}"
        return float(raw[collective]), f"{key}.{collective}"
    return float(raw), key


def _nodes(run: NcclTestsRun, expect: Mapping[str, Any]) -> tuple[int | None, str]:
    if run.hosts:
        return len(run.hosts), f"{len(run.hosts)} node(s)"
    ranks = reader.inferred_ranks(run)
    per_node = expect.get("gpu_count")
    if ranks and isinstance(per_node, int) and per_node > 0:
        nodes = math.ceil(ranks / per_node)
        return nodes, f"{nodes} node(s): {ranks} ranks (from busbw/algbw, no Rank lines) at {per_node} GPUs per node"
    return None, "node count unknown (no Rank lines): judged as one node"


def layout_verdict(run: NcclTestsRun, subject: str, expect: Mapping[str, Any]) -> ProbeVerdict | None:
    """The capture's hosts x GPUs against what is expected: `nodes` (hosts) and the platform's `gpu_count`
    (ranks on every host). A run on fewer nodes or GPUs than the evidence claims must not stand for it."""
    want_nodes, per_node = expect.get("nodes"), expect.get("gpu_count")
    if not run.hosts or (want_nodes is None and (per_node is None or len(run.hosts) < 2)):
        if want_nodes is not None and not run.hosts:
            return not_judged(subject, "hosts x GPUs", f"{want_nodes} node(s) expected, and the capture has no "
                              f"Rank lines naming its hosts")
        return None
    per_host: dict[str, int] = {}
    for r in run.ranks:
        if r.host:
            per_host[r.host] = per_host.get(r.host, 0) + 1
    problems = []
    if want_nodes is not None and len(per_host) != want_nodes:
        problems.append(f"{len(per_host)} host(s), {want_nodes} expected")
    if per_node is not None:
        short = {h: n for h, n in per_host.items() if n != per_node}
        problems += [f"{h} ran {n} rank(s), the platform has {per_node} GPUs per node" for h, n in short.items()]
    shown = " + ".join(f"{h} x{n}" for h, n in per_host.items())
    expected = f"{want_nodes if want_nodes is not None else len(per_host)} x {per_node if per_node else '?'}"
    return ProbeVerdict(subject, "hosts x GPUs", not problems, "; ".join(problems) or f"{shown}", shown, expected)


_TWO_NODE = ("2 nodes: NCCL's default Tree/NVLSTree all_reduce can exceed the network on 2 nodes (NVIDIA/nccl-tests "
             "#290, #319), and this capture does not say the algorithm was Ring; rerun with NCCL_ALGO=Ring to judge "
             "the network itself")


def _busbw_verdict(run: NcclTestsRun, subject: str, expect: Mapping[str, Any]) -> ProbeVerdict | None:
    """One node: the platform's NVLink floor (busbw_min). Several: the fabric floor, never the NVLink one:
    busbw_min_multinode when given (an absolute floor), else a fraction of the nodes' line rate
    (judging/fabric.py); unknown line rate, too small a size or another collective: not judged."""
    row = run.largest()
    if row is None:
        return None
    if not row.placements():  # rows, and none measured at the largest size: no floor is met or missed
        return not_judged(subject, "busbw", f"the largest row ({row.size} B, line {row.line}) has no placement "
                          f"measured: the busbw at the largest size is not known")
    places = row.placements()
    worst = min(p.busbw for _, p in places)
    shown = (f"{' / '.join(f'{p.busbw:.2f}' for _, p in places)} GB/s "
             f"({' / '.join(n.replace('_', '-') for n, _ in places)}) at {row.size} B")
    asked = largest_promised(run)
    if run.unread_rows or (asked is not None and row.size < asked):  # the size the floor is for was not read
        why = (f"the table row at line {run.unread_rows[0][0]} could not be read" if run.unread_rows else
               f"the header promises sizes up to {asked} B and the table stops at {row.size} B")
        return not_judged(subject, "busbw", f"{why}: the busbw at the largest size is not known, and the floor is "
                          f"for the largest size; {shown} is the largest row read", worst)
    nodes, about = _nodes(run, expect)
    if nodes is None or nodes < 2:
        floor, label = _floor(expect, "busbw_min", run.collective)
        if floor is None:  # nothing to judge against is no pass: as ib-write-bw without ib_write_bw_min
            return not_judged(subject, "busbw", f"{label or 'no busbw floor given (busbw_min)'}; {shown}; {about}",
                              worst)
        return ProbeVerdict(subject, "busbw", worst >= floor, f"{shown}; {about}; floor {floor:g} GB/s ({label})",
                            worst, f">= {floor:g}")
    socket = run.socket if isinstance(run, NcclCapture) else ()
    if socket:  # NCCL fell back to TCP sockets: the busbw is the sockets', not the fabric's, whatever it reads
        host, number, line = socket[0]
        more = f" (and {len(socket) - 1} more host(s))" if len(socket) > 1 else ""
        return not_judged(subject, "busbw", f"{host}'s network is NCCL's Socket fallback (line {number}: {line!r})"
                          f"{more}: the busbw measured TCP sockets, not the RDMA fabric, so the fabric floor is not "
                          f"judged; {shown}; {about}", worst)
    explicit, label = _floor(expect, "busbw_min_multinode", run.collective)
    caveat = f"; {_TWO_NODE}" if nodes == 2 and run.collective == "all_reduce" else ""
    if explicit is not None:
        return ProbeVerdict(subject, "busbw", worst >= explicit, f"{shown}; {about}; floor {explicit:g} GB/s "
                            f"({label}){caveat if worst >= explicit else ''}", worst, f">= {explicit:g}")
    rule = fabric.rule_of(expect)
    if run.collective is None:
        return not_judged(subject, "busbw", f"the capture does not say which collective it ran, and the fabric rule "
                          f"is per collective; {shown}; {about}", worst)
    limit = fabric.floor(rule, run.collective, fabric.line_rate(expect, rule), subject)
    if isinstance(limit, str):
        return not_judged(subject, "busbw", f"{limit.removeprefix('not judged: ')}; {shown}; {about}", worst)
    if row.size < rule.min_size:
        return not_judged(subject, "busbw", f"the largest size is below the {units.format_size(rule.min_size)} the "
                          f"fabric rule judges at ({rule.origin}): busbw below the plateau says little of the network; "
                          f"{shown}; {about}", worst)
    ok = worst >= limit.value
    return ProbeVerdict(subject, "busbw", ok, f"{shown}; {about}; fabric floor {limit.value:g} GB/s "
                        f"({limit.expression.removeprefix('>= ')}; line rate from {limit.source.rsplit(' from ', 1)[-1]}; "
                        f"rule {rule.origin}){caveat if ok else ''}", worst, f">= {limit.value:g}")


PROBE = Probe(
    name="nccl-tests",
    description="an nccl-tests/rccl-tests log: crashes, #wrong, out-of-bounds values, busbw floor at the largest size",
    input_help="nccl-tests or rccl-tests output (all_reduce_perf and the other *_perf binaries; text or -J JSON)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("busbw_min", "busbw_min_multinode", "gpu_model", "gpu_count", "nodes", "fabric_gbps"),
)
