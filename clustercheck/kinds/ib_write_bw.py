"""`measure: ib_write_bw`: perftest's RDMA write bandwidth per NIC, a loopback run on each node's first
rank (clustercheck/measure/native_io.py), judged per NIC. Where perftest is not installed, or the node
has no RDMA device (none in sysfs, and no problem of one in its facts), the check is skipped saying so. A
device whose sysfs facts name a problem (fabric/rdma.py: a ports/ directory that lists no port, a state the
kernel would not write, ACTIVE without LinkUp) fails naming the node and device; a sysfs file of one that
could not be read leaves the item not judged naming it; never a skip, never a pass on the other NICs.

Floor per NIC: `ib_write_bw_min` (Gb/s) from the profile's expect: block or --expect when given, else 0.9 of
the fastest rate of the port's siblings (the node's ACTIVE ports of its HCA model, its own included) as
sysfs reports them, so an NDR port trained down to 200 Gb/s is judged against 400 and its line_fraction
reads 0.475, not 0.95 (docs/fabric.md); 0.9 of its own rate where it has no sibling. Azure's health
checks gate ib_write_bw with GPUDirect at 380 of 400 Gb/s per NDR NIC on ND H100 v5 (95%) and 360 (90%)
on ND H200 v5 and GB200 v6 (Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf,
conf/nd96isr_h200_v5.conf). A run that failed or was cut off fails its NIC, on either side of the loopback:
the server's failure line, exit status or lower reading is judged beside the client's. Ranks: clustercheck.measure.native_io:ib_write_bw."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from clustercheck.errors import HarnessError, Skip
from clustercheck.fabric.rdma import Problem, problems_of
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.unjudged import notes_or_error
from clustercheck.judging.verdicts import Expectation, Verdict, of_limit
from clustercheck.kinds import params as shared
from clustercheck.kinds.base import NON_NEGATIVE, Answers, Kind, Rules
from clustercheck.kinds.native import BUILT_IN, tool_timeout, unclean_end
from clustercheck.kinds.base import CheckSpec
from clustercheck.schema import Fields, between
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import ib_write_bw as reader
from clustercheck.units import is_number

METRICS = {"bw_gbps": "Gb/s", "line_fraction": "ratio"}
FRACTION = 0.9
SOURCE = ("Azure gates ib_write_bw with GPUDirect at 380 of 400 Gb/s per NDR NIC on ND H100 v5 (95%) and 360 (90%) "
          "on ND H200 v5 and GB200 v6 (Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf, conf/nd96isr_h200_v5.conf, "
          "customTests/azure_ib_write_bw_gdr.nhc); clustercheck's floor 0.9 of the fastest rate of the port's sibling ports on its node")
_DEVICE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def parse(f: Fields) -> dict[str, Any]:
    devices = f.get("devices", list, [])
    if not all(isinstance(d, str) and _DEVICE.fullmatch(d) for d in devices):
        raise f.error("devices", "expected RDMA device names such as [mlx5_0, mlx5_3]")
    params = {"size": shared.size(f, "size", "8MiB"),  # Azure's MESSAGE_SIZE=8388608
              "duration": f.get("duration", int, 5, check=between(1, 600)),
              "qps": f.get("qps", int, 1, check=between(1, 64)),
              "gid_index": f.get("gid_index", int, None, check=between(0, 255)),  # RoCE: usually 3
              "devices": devices}
    f.done()
    return params


def fits(params: Mapping[str, Any], timeout: float) -> tuple[str, str] | None:
    """The rank runs one client per port in turn, each within its share of the tool's timeout
    (measure/native_io.py): one port at the least, as the ports are found on the node."""
    if params["duration"] >= (share := tool_timeout(timeout)):
        return "duration", (f"{params['duration']} s does not fit timeout {timeout:g} s: an ib_write_bw run per "
                            f"port within {share:g} s of it for the tool")
    return None


def argv(params: Mapping[str, Any], device: str, port: int, ib_port: int = 1) -> list[str]:
    """perftest's flags (ib_write_bw --help): -d device, -i the device's IB port (perftest's default is 1, so
    without it port 2 of a dual-port HCA is never measured), -p TCP port, -s size, -D seconds, -q QPs, -F (no
    CPU frequency check), --report_gbits, -x GID index."""
    out = ["ib_write_bw", "-d", device, "-i", str(ib_port), "-p", str(port), "-s", str(params["size"]),
           "-D", str(params["duration"]), "-q", str(params["qps"]), "-F", "--report_gbits"]
    return out + (["-x", str(params["gid_index"])] if params.get("gid_index") is not None else [])


def reads(check: CheckSpec) -> tuple[str, ...]:
    """The floor always; fabric_ports only when the check names no devices of its own (task_params)."""
    return ("ib_write_bw_min",) if check.params["devices"] else ("ib_write_bw_min", "fabric_ports")


def task_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    devices = check.params["devices"] or list(expect.get("fabric_ports") or [])
    return {**check.params, "devices": list(dict.fromkeys(devices)), "tool_timeout": tool_timeout(check.timeout)}


def named_in(device: str, port: int, names: Sequence[str]) -> bool:
    """Whether a port is among names: its device (mlx5_0, every port of it) or the port itself (mlx5_0/1),
    as fabric_ports names ports."""
    return device in names or f"{device}/{port}" in names


def rdma_problems(problems: Sequence[Problem]) -> list[Problem]:
    """The problems of a node's network facts (clustercheck/fabric/rdma.py) that are its RDMA devices', as
    rdma.py marks each where it finds it (Problem.nic): not the PCI tree's (fabric/pcitree.py), nor a device's
    PCI function missing from it: perftest runs without it, and the placement checks and the `ib` probe judge
    it (a soft RDMA device has none)."""
    return [p for p in problems if p.nic]


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    result = next((r for r in a.per_rank if r.get("binary")), None)
    if result is None:
        raise HarnessError(f"{a.check.id}: no rank of {', '.join(sorted(set(a.hosts)))} ran ib_write_bw")
    if result["outcome"] == "missing":
        raise Skip(result["reason"])
    if result["outcome"] != "ran":
        raise HarnessError(result["reason"])
    floor_gbps = rules.expect.get("ib_write_bw_min")
    subjects: dict[str, dict[str, float]] = {}
    verdicts: list[Verdict] = []
    # A NIC whose run could not be read is the harness's word, not the hardware's: it must not discard the
    # verdicts of the NICs judged before or after it, so each is kept and decided on at the end
    unread: list[tuple[str, str]] = []  # (NIC, why its run gave no bandwidth)
    unjudged: list[str] = []  # NICs measured but with no floor to judge them against, sysfs files not read
    run_rule = Expectation(a.check.id, "run", "a complete run", BUILT_IN,
                           "the tool's whole table, no failure line, exit status 0")
    named_by = "the check's devices:" if a.check.params.get("devices") else "the expectation fabric_ports"
    present = Expectation(a.check.id, "device", "present", f"{a.check.file}:{a.check.line}" if a.check.params.get("devices") else
                          rules.expect_origin, f"named in {named_by}")
    # a device whose sysfs facts name a problem (fabric/rdma.py) is there but unusable, the hardware's failure;
    # a file of it that could not be read leaves it not judged: either names it, never "no RDMA port" nor a pass
    # the rank's facts as rdma.py recorded them: an entry of any other shape is a harness error naming it
    problems = rdma_problems(problems_of(result.get("problems", []), f"ib_write_bw on {result['host']}: network facts"))
    usable = Expectation(a.check.id, "device", "usable", BUILT_IN, "its sysfs tree as the kernel writes it: its "
                         "ports listed, each port's state and rate readable and consistent (clustercheck/fabric/rdma.py)")
    verdicts += [Verdict("device", "unusable", "", usable, False, subject=p.subject, detail=f"on {result['host']}: {p.text}")
                 for p in problems if p.subject and not p.unread]
    unjudged += [f"ib_write_bw on {result['host']}{f' ({p.subject})' if p.subject else ''}: not judged: {p.text}"
                 for p in problems if p.unread or not p.subject]
    broken = {p.subject.split("/")[0] for p in problems if p.subject}  # named in its problem, not "absent"
    verdicts += [Verdict("device", "absent", "", present, False, subject=name,
                         detail=f"named in {named_by} and not on {result['host']}")
                 for name in result.get("absent", ()) if name.split("/")[0] not in broken]
    for run in result["runs"]:
        # a port of a multi-port HCA is its own subject (mlx4_0/2), one port's device keeps its name (mlx5_0)
        dev = f"{run['device']}/{run.get('port', 1)}" if run.get("device_ports", 1) > 1 else run["device"]
        client = run["client"]
        if client["outcome"] != "ran":
            unread.append((dev, f"ib_write_bw on {result['host']} ({dev}): {client['reason']}"))
            continue
        try:
            parsed = reader.parse(client["stdout"])
        except NotToolOutput as exc:
            ended = f"exit status {client['returncode']}" if client["returncode"] else "exit status 0"
            server = (run.get("server") or {}).get("stderr_tail", "").strip().splitlines()[-1:]
            unread.append((dev, f"ib_write_bw on {result['host']} ({dev}) ended with {ended} without a bandwidth "
                                f"table ({exc}){'; server: ' + server[0][:160] if server else ''}"))
            continue
        # a returncode of None or False (no exit status read) was no problem: never a clean exit (native.py)
        problem = parsed.failure or ("" if parsed.complete else "the table was cut off") or unclean_end(client) or ""
        server_problem, server_rows = _server(run.get("server") or {})
        problem = "; ".join(p for p in (problem, server_problem) if p)
        if problem:
            verdicts.append(Verdict("run", "failed", "", run_rule, False, subject=dev, detail=problem))
        largest = parsed.largest()
        if largest is None:
            continue
        value = largest.avg_gbps
        # the server's own table of the same run (perftest prints one on each side): its lower reading is the
        # NIC's, never dropped for the client's
        server_low = min((r.avg_gbps for r in server_rows if r.bytes == largest.bytes), default=value)
        worst = f"the server's reading {server_low:.2f} Gb/s (client's {value:.2f})" if server_low < value else None
        value = min(value, server_low)
        rate, used = _line_rate(run, result.get("peers"))
        subjects[dev] = {"bw_gbps": value, **({"line_fraction": value / rate} if rate else {})}
        if floor_gbps is not None:
            limit = Limit(a.check.id, "bw_gbps", ">=", float(floor_gbps), "Gb/s", f">= {float(floor_gbps):g}",
                          "the expectation ib_write_bw_min", rules.expect_origin)
            verdicts.append(of_limit("bw_gbps", value, limit, worst, subject=dev))
        elif rate:
            limit = Limit(a.check.id, "bw_gbps", ">=", FRACTION * rate, "Gb/s", f">= {FRACTION:g} * {rate:g} Gb/s",
                          f"{SOURCE}; {used}", BUILT_IN)
            verdicts.append(of_limit("bw_gbps", value, limit, worst, subject=dev))
        else:
            unjudged.append(f"ib_write_bw on {result['host']} ({dev}): not judged: {used} and "
                            f"no ib_write_bw_min is given")
    # nothing failed: what could not be read or judged (no verdict at all included) is the item's error, never
    # a pass on the rest (judging/unjudged.py); beside a failure, the NICs measured with no floor are its notes
    gaps = [why for _, why in unread] + unjudged or ([] if verdicts else
                                                     [f"ib_write_bw on {result['host']}: no NIC gave a bandwidth"])
    notes_or_error((v.passed for v in verdicts), gaps, "; ".join(gaps))
    # ... and each NIC that gave no bandwidth fails its run beside them (none is unread where nothing failed)
    verdicts += [Verdict("run", "failed", "", run_rule, False, subject=dev, detail=why) for dev, why in unread]
    rows = [{"subject": s, "metric": k, "median": v, "min": v, "max": v} for s, m in subjects.items() for k, v in m.items()]
    worst = min(subjects, key=lambda s: subjects[s]["bw_gbps"], default=None)
    return Measurement(metrics={}, units=dict(METRICS), rows=rows, worst=worst, subjects=subjects,
                       notes=tuple(unjudged)), verdicts


def _server(server: Mapping[str, Any]) -> tuple[str, tuple[reader.Row, ...]]:
    """What the loopback's server side said: a problem (its failure line on stdout or stderr, a cut-off table,
    an end other than exit status 0, or why it never ran) and its table's rows. A server that printed no table and no failure
    line adds nothing: the client's table is the run's."""
    if not server:
        return "", ()
    if server.get("outcome") != "ran":
        return f"server: {server.get('reason') or 'did not run'}", ()
    said: list[str] = []
    rows: tuple[reader.Row, ...] = ()
    try:
        parsed = reader.parse(str(server.get("stdout") or ""))
        rows = parsed.rows
        said += [parsed.failure or ("" if parsed.complete or not rows else "its table was cut off")]
    except NotToolOutput:
        out = reader.failure_in(str(server.get("stdout") or ""))
        said.append(f"stdout: {out}" if out else "")
    err = reader.failure_in(str(server.get("stderr_tail") or ""))  # perftest prints its errors to stderr
    said.append(f"stderr: {err}" if err else "")
    # a returncode of None or False (no exit status read) is no clean exit, as on the client's side (native.py);
    # a server still running after its client ended was killed after the rank's wait, not the tool's timeout
    if server.get("timed_out"):
        said.append(f"still running {server.get('timeout', 0):g} s after its client ended "
                    f"({unclean_end({**server, 'timed_out': False}) or 'exited with status 0'})")
    else:
        said.append(unclean_end({**server, "timed_out": False}) or "")
    said = [s for s in said if s]
    return (f"server: {', '.join(said)}" if said else ""), rows


def _line_rate(run: Mapping[str, Any], peers: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The rate a NIC's bandwidth is a fraction of: the fastest rate of its sibling ports on the node (the
    ACTIVE ports of its HCA model, clustercheck/fabric/rdma.py peers), never only its own, so a port trained
    down to half its rate reads half; its own rate where it has no sibling or the rank did not say. A rate is
    known only as a finite number above 0: a -400 (or NaN, or text) would be a floor every NIC passes, so
    without a known rate of its own the NIC is not judged (None, and why, naming the value)."""
    raw = run.get("rate_gbps")
    own = _rate(raw)
    peer = (peers or {}).get(f"{run['device']}/{run.get('port', 1)}")
    peer = peer if isinstance(peer, Mapping) else None
    fastest = _rate(peer.get("fastest_gbps")) if peer else None
    if own is None:
        return None, ("the port's rate is unknown" if raw is None else
                      f"the port's rate from sysfs ({repr(raw)[:40]} Gb/s) is not a rate")
    if peer and fastest is None:  # the siblings' figure is not a rate: never a floor, the port's own is
        return own, (f"the port's own rate {own:g} Gb/s from sysfs (its sibling ports' fastest rate "
                     f"{repr(peer.get('fastest_gbps'))[:40]} is not a rate)")
    if peer and fastest is not None and fastest > own:
        return fastest, (f"the fastest rate of its {peer['others']} sibling {peer['model']} "
                         f"port(s) on the node, {fastest:g} Gb/s from sysfs (its own rate: {own:g} Gb/s, trained down)")
    if peer:
        return own, (f"the port's rate {own:g} Gb/s from sysfs, the fastest of its "
                     f"{peer['others']} sibling {peer['model']} port(s) on the node")
    return own, f"the port's own rate {own:g} Gb/s from sysfs (no sibling port of its model to compare with)"


def _rate(value: Any) -> float | None:
    """A port rate in Gb/s when `value` is one: a number (not a bool or text), finite and above 0."""
    if not is_number(value):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


PROVIDES = (Kind("ib_write_bw", ("node",), METRICS, parse,
                 "perftest ib_write_bw, a loopback run per ACTIVE RDMA NIC on each node's first rank, judged per NIC "
                 "against 0.9 of its port rate or ib_write_bw_min", "clustercheck.measure.native_io:ib_write_bw", judge,
                 limited=False, task_params=task_params, skips_on_answers=True,
                 domains={"line_fraction": NON_NEGATIVE}, fits=fits, expect_keys=("ib_write_bw_min", "fabric_ports"),
                 expect_keys_of=reads),)
