"""perftest's `ib_write_bw`, judged per NIC: `clustercheck probe ib-write-bw --input FILE`.

The BW average at the largest size must reach `ib_write_bw_min` (Gb/s per NIC): Azure's health checks
gate ib_write_bw with GPUDirect at 380 Gb/s per 400 Gb/s NDR NIC on ND H100 v5 and 360 on ND H200 v5
and GB200 v6 (Azure/azurehpc-health-checks conf/*.conf, customTests/azure_ib_write_bw_gdr.nhc). A run
that failed, or whose table was cut off before its closing line, fails; no floor given is not judged.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes.base import Probe, ProbeParseError, ProbeSkip, ProbeVerdict, not_judged
from clustercheck.toolout import NotToolOutput
from clustercheck.toolout import ib_write_bw as reader
from clustercheck.toolout.ib_write_bw import IbWriteBw


def parse(text: str) -> IbWriteBw:
    try:
        return reader.parse(text)
    except NotToolOutput as exc:
        raise ProbeParseError(str(exc)) from None


def collect() -> str:
    raise ProbeSkip("this probe judges a captured ib_write_bw run: give --input FILE; a suite runs it per NIC with "
                    "`measure: ib_write_bw`")


def judge(run: IbWriteBw, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    subject = run.device or "ib_write_bw"
    out = []
    if run.failure:
        out.append(ProbeVerdict(subject, "run", False, f"the run failed: {run.failure}", run.failure, "a complete run"))
    elif not run.complete:
        out.append(ProbeVerdict(subject, "run", False, "the table has no closing line: the run was cut off (or ran with "
                                "--run_infinitely until stopped), so its last reading may not be its last word",
                                "cut off", "a complete run"))
    largest = run.largest()
    if largest is None:
        return out or [ProbeVerdict(subject, "run", False, "no bandwidth row", "no rows", "a table")]
    shown = f"BW average {largest.avg_gbps:.2f} Gb/s at {largest.bytes} B ({run.test}, link {run.link_type or '?'})"
    floor = expect.get("ib_write_bw_min")
    if floor is None:
        out.append(not_judged(subject, "bandwidth", f"no floor given (--expect ib_write_bw_min=N Gb/s per NIC; Azure "
                              f"gates 380 on a 400G NDR NIC); {shown}", largest.avg_gbps))
    else:
        out.append(ProbeVerdict(subject, "bandwidth", largest.avg_gbps >= float(floor), f"{shown}; floor {floor:g} Gb/s "
                                f"(ib_write_bw_min)", largest.avg_gbps, f">= {floor:g}"))
    return out


PROBE = Probe(
    name="ib-write-bw",
    description="perftest ib_write_bw: the BW average per NIC at the largest size against a floor",
    input_help="ib_write_bw output (client, or server and client in one stream; --report_gbits or MB/sec)",
    scope="node",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("ib_write_bw_min",),
)
