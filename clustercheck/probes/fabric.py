"""NVSwitch fabric state per GPU, from `nvidia-smi -q`'s `Fabric` section (State, Status).

On NVSwitch systems (HGX/DGX H100, H200, B200) a GPU must register with the fabric before CUDA can use it:
the fabric manager trains the NVLinks and each GPU's state goes Not Started -> In Progress -> Completed;
`status` means something only once the state is Completed (nvmlGpuFabricInfo_t,
https://docs.nvidia.com/deploy/nvml-api/structnvmlGpuFabricInfo__t.html). If the fabric manager is down or
fails, CUDA initialisation fails (cudaErrorSystemNotReady; NVIDIA Fabric Manager user guide,
https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html). Every GPU measurement on such
a node is then a harness error, and errors never exclude a node: this probe makes it a failure per GPU.

With `nvswitch_fabric: true` every GPU must read State Completed, Status Success; anything else fails,
N/A and a missing section included. Without it, N/A or Not Supported on every GPU is a skip (no NVSwitch
fabric here) and any other state than Completed/Success fails: a fabric that exists and is not healthy.
With the platform's `gpu_count`, the GPUs the capture lists are counted against it: a GPU missing from
`nvidia-smi -q` (fallen off the bus) has no fabric state to judge, and is named, never silence.
"""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import nvsmi
from clustercheck.probes.base import Probe, ProbeSkip, ProbeVerdict

HEALTHY = ("Completed", "Success")
_ABSENT = {"N/A", "[N/A]", "Not Supported", "[Not Supported]"}
_HINT = {  # what each unhealthy state means for the operator; a state stuck at In Progress is the fabric
    # manager down or, on Blackwell, its NVLSM missing (Fabric Manager user guide, GPU fabric registration)
    "Not Started": "fabric registration has not started (is the fabric manager running?)",
    "In Progress": "fabric registration has not completed (is the fabric manager running?)",
}


def parse(text: str) -> nvsmi.NvsmiReport:
    """Any `nvidia-smi -q` report: a driver too old to print a Fabric section is judged, not refused."""
    return nvsmi.parse(text)


def _read(g: nvsmi.NvsmiGpu) -> tuple[str | None, str | None]:
    return g.get("Fabric/State"), g.get("Fabric/Status")


def judge(report: nvsmi.NvsmiReport, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    if report.missing:
        return nvsmi.without(report.missing, expect, "nvswitch_fabric", "NVSwitch fabric")
    required = bool(expect.get("nvswitch_fabric", False))
    read = [(g, *_read(g)) for g in report.gpus]
    if not required and all(state is None or state in _ABSENT for _, state, _ in read):
        seen = sorted({state for _, state, _ in read if state is not None})
        raise ProbeSkip("no NVSwitch fabric on this machine ("
                        + (f"Fabric State {' or '.join(seen)} on every GPU)" if seen
                           else "nvidia-smi -q shows no Fabric section)"))
    return (nvsmi.coverage(report, "fabric") + [_verdict(g, state, status, required) for g, state, status in read]
            + nvsmi.listed(report, expect, "fabric state"))


def _verdict(g: nvsmi.NvsmiGpu, state: str | None, status: str | None, required: bool) -> ProbeVerdict:
    expected = f"State {HEALTHY[0]}, Status {HEALTHY[1]}"
    if state is None:
        why = "nvswitch_fabric: true" if required else "other GPUs here report a fabric state"
        return ProbeVerdict(g.label, "NVSwitch fabric", False, f"no Fabric section in nvidia-smi -q ({why})",
                            measured="no Fabric section", expected=expected)
    measured = f"State {state}, Status {status or 'missing'}"
    if (state, status) == HEALTHY:
        return ProbeVerdict(g.label, "NVSwitch fabric", True, measured, measured=measured, expected=expected)
    if state in _ABSENT:
        why = ("this GPU reports no NVSwitch fabric where one is expected (nvswitch_fabric: true)" if required
               else "no fabric state while other GPUs here report one")
    elif state == HEALTHY[0]:
        why = f"fabric registration failed; CUDA needs {expected}" if status else "no Status read"
    else:
        why = f"{_HINT.get(state, 'fabric registration not completed')}; CUDA needs {expected}"
    return ProbeVerdict(g.label, "NVSwitch fabric", False, f"{measured}: {why}", measured=measured,
                        expected=expected)


def collect() -> str | nvsmi.NvsmiReport:
    return nvsmi.collect_report("-q")


PROBE = Probe(
    name="fabric",
    description="NVSwitch fabric registration per GPU (State Completed, Status Success)",
    input_help="`nvidia-smi -q` output",
    scope="gpu",
    parse=parse,
    collect=collect,
    judge=judge,
    expect_keys=("nvswitch_fabric", "gpu_count"),
)
