"""Probes fail closed: a failing nvidia-smi is an error naming the command, its status and its stderr (only a
missing binary is a skip); a crashed tool's log and text from another tool are refused (exit 2), never 0."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.probes import ProbeParseError, ecc, ecc_nvml, get, nvsmi, run_live, versions
from evidence import TOOLS, text

# Real nvidia-smi failures. Messages and, where the thread shows it, the exit status:
LOST = "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error"  # NVIDIA/open-gpu-kernel-modules#387
FAILURES = [
    (LOST, 255),  # the threads do not show this one's exit status; 255 stands in
    ("Failed to initialize NVML: Driver/library version mismatch", 18),       # anderskm/gputil#55 (echo $? -> 18)
    ("Failed to initialize NVML: No supported GPUs were found", 255),         # kubernetes-sigs/dra-driver-nvidia-gpu#1008
    ("No devices were found", 6),  # NVIDIA/open-gpu-kernel-modules#862; status not shown there, 6 stands in
]
COMMAND = {"ecc": "`nvidia-smi -q`", "throttle": "`nvidia-smi -q`", "nvlink": "`nvidia-smi nvlink -s`",
           "numa": "`nvidia-smi topo -m`", "topo": "`nvidia-smi topo -m`"}


def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str = "", code: int = 0, stdout: str = "") -> None:
    """An executable `nvidia-smi` first on PATH that prints `stdout`, then `stderr` to stderr, and exits `code`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "out").write_text(stdout)
    (tmp_path / "err").write_text(stderr + "\n" if stderr else "")
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n/bin/cat {tmp_path / 'out'}\n/bin/cat {tmp_path / 'err'} >&2\nexit {code}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(ecc, "read_nvml", _no_nvml)


def _no_nvml() -> nvsmi.NvsmiReport:
    """NVML is the ecc probe's first choice live; with no driver it falls back to nvidia-smi's text."""
    raise ecc_nvml.NvmlUnavailable("no NVIDIA driver")


@pytest.mark.parametrize("message, code", FAILURES, ids=["gpu-lost", "version-mismatch", "no-supported-gpus", "no-devices"])
@pytest.mark.parametrize("name", ["ecc", "throttle", "nvlink", "numa"])
def test_a_failing_nvidia_smi_is_an_error_naming_command_status_and_stderr(tmp_path, monkeypatch, name, message, code):
    stand_in(tmp_path, monkeypatch, message, code)
    outcome = run_live(get(name), {})
    assert outcome.outcome == "error", outcome
    assert f"{COMMAND[name]} exited with status {code}: stderr: {message}" in outcome.reason


def test_a_failing_nvidia_smi_makes_topo_an_error(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, LOST, 255)
    outcome = run_live(get("topo"), {})
    assert outcome.outcome == "error" and f"exited with status 255: stderr: {LOST}" in outcome.reason


def test_an_error_on_stdout_only_is_still_named(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, "", 255, stdout=LOST + "\n")
    outcome = run_live(get("ecc"), {})
    assert outcome.outcome == "error" and outcome.reason.endswith(f"exited with status 255: stdout: {LOST}")


def test_an_nvidia_smi_killed_by_a_signal_is_an_error(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch)
    (tmp_path / "bin" / "nvidia-smi").write_text("#!/bin/sh\nkill -SEGV $$\n")
    outcome = run_live(get("throttle"), {})
    assert outcome.outcome == "error" and "`nvidia-smi -q` was killed by SIGSEGV" in outcome.reason


@pytest.mark.parametrize("name", ["ecc", "throttle", "nvlink", "numa"])
def test_only_a_missing_nvidia_smi_is_a_skip(tmp_path, monkeypatch, name):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no nvidia-smi anywhere on PATH
    monkeypatch.setattr(ecc, "read_nvml", _no_nvml)
    outcome = run_live(get(name), {})
    assert outcome.outcome == "skipped" and outcome.reason == "nvidia-smi not found: no NVIDIA driver on this machine"


def test_nvlink_on_a_node_without_nvlink_is_a_skip_but_its_text_is_judged(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, stdout="")
    outcome = run_live(get("nvlink"), {})
    assert outcome.outcome == "skipped" and "no NVLink on this machine" in outcome.reason


def test_a_healthy_stand_in_passes_so_the_errors_above_come_from_the_failure(tmp_path, monkeypatch):
    body = text("nvidia-smi-q", "h100-80gb-hbm3-nvidia-smi-a-della.txt").split("\n", 2)[2]
    stand_in(tmp_path, monkeypatch, stdout=body)
    assert run_live(get("ecc"), {}).outcome == "passed"
    assert run_live(get("throttle"), {}).outcome == "passed"


# -- crashed logs and text from other tools -----------------------------------------------------------

CRASHED = TOOLS / "nvbandwidth-crashed" / "one-to-all-read-sm-8xl40s-aborted-core-dumped.txt"


def test_versions_refuses_a_crashed_nvbandwidth_log(capsys):
    assert main(["probe", "versions", "--input", str(CRASHED)]) == 2
    err = capsys.readouterr().err
    assert "line 25: 'Aborted (core dumped)': the captured program crashed" in err and len(err.splitlines()) == 1


def test_versions_refuses_a_real_nvbandwidth_log_cut_by_a_real_abort():
    """The GH200 all-tests log (it carries 'Driver Version: 550.54.15') cut after its first test, followed by
    the last lines of the crashed L40S run above."""
    real = text("nvbandwidth", "all-tests-gh200-v0.6-waived-superbench-fixture.txt")
    cut = real[:real.index("Running device_to_host_memcpy_ce.")] + "\n".join(CRASHED.read_text().splitlines()[-4:])
    with pytest.raises(ProbeParseError, match="crashed"):
        versions.parse(cut)
    with pytest.raises(ProbeParseError, match="nvidia-smi -q"):  # and, uncut, it is still not nvidia-smi -q
        versions.parse(real)


# probe -> fixture folders holding its own tool's output; every other capture must be refused with exit 2
OWN = {
    "versions": {"nvidia-smi-q"}, "env": set(), "pci-acs": {"lspci-acs"}, "pcie-link": {"lspci-acs", "nvidia-smi-q"},
    "numa": {"nvidia-smi-topo"}, "nvlink": {"nvlink-status"}, "ecc": {"nvidia-smi-q"}, "throttle": {"nvidia-smi-q"},
    "gds": {"gdscheck"}, "ib": {"ibstat", "ibv_devinfo"},
}
CAPTURES = sorted(TOOLS.glob("*/*.txt"))


@pytest.mark.parametrize("name", sorted(OWN))
def test_every_probe_refuses_every_other_tools_capture_through_the_cli(name, capsys):
    accepted = []
    for path in CAPTURES:
        if path.parent.name in OWN[name]:
            continue
        code = main(["probe", name, "--input", str(path)])
        out = capsys.readouterr()
        if code != 2 or "Traceback" in out.err:
            accepted.append(f"{path.parent.name}/{path.name}: exit {code}")
    assert not accepted and len(CAPTURES) > 40
