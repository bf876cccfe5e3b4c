"""Probes fail closed: a failing nvidia-smi is an error naming the command, its status and its stderr (only a
missing binary is a skip); a crashed tool's log and text from another tool are refused (exit 4, bad input), never 0."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.probes import ecc, ecc_nvml, nvsmi, versions
from clustercheck.probes import get, run_live
from clustercheck.probes.base import ProbeParseError
from evidence import TOOLS, text

# Real nvidia-smi failures. Messages and, where the thread shows it, the exit status:
LOST = "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error"  # NVIDIA/open-gpu-kernel-modules#387
FAILURES = [
    (LOST, 255),  # the threads do not show this one's exit status; 255 stands in
    ("Failed to initialize NVML: Driver/library version mismatch", 18),       # anderskm/gputil#55 (echo $? -> 18)
    ("Failed to initialize NVML: No supported GPUs were found", 255),         # kubernetes-sigs/dra-driver-nvidia-gpu#1008
    ("No devices were found", 6),  # NVIDIA/open-gpu-kernel-modules#862; status not shown there, 6 stands in
]
COMMAND = {"ecc": "`nvidia-smi -q`", "throttle": "`nvidia-smi -q`", "fabric": "`nvidia-smi -q`",
           "nvlink": "`nvidia-smi nvlink -s`", "numa": "`nvidia-smi topo -m`", "topo": "`nvidia-smi topo -m`"}


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
@pytest.mark.parametrize("name", ["ecc", "throttle", "fabric", "nvlink", "numa"])
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


@pytest.mark.parametrize("name", ["ecc", "throttle", "fabric", "nvlink", "numa"])
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
    assert run_live(get("fabric"), {"nvswitch_fabric": True}).outcome == "passed"


# -- crashed logs and text from other tools -----------------------------------------------------------

CRASHED = TOOLS / "nvbandwidth-crashed" / "one-to-all-read-sm-8xl40s-aborted-core-dumped.txt"


def test_versions_refuses_a_crashed_nvbandwidth_log(capsys):
    assert main(["probe", "versions", "--input", str(CRASHED)]) == 4
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


# probe -> fixture folders holding its own tool's output; every other capture must be refused with exit 4
OWN = {
    "versions": {"nvidia-smi-q"}, "env": set(), "pci-acs": {"lspci-acs"}, "pcie-link": {"lspci-acs", "nvidia-smi-q"},
    "numa": {"nvidia-smi-topo"}, "nvlink": {"nvlink-status"}, "ecc": {"nvidia-smi-q"}, "throttle": {"nvidia-smi-q"},
    "fabric": {"nvidia-smi-q"}, "gds": {"gdscheck"}, "ib": {"ibstat", "ibv_devinfo"},
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
        if code != 4 or "Traceback" in out.err:
            accepted.append(f"{path.parent.name}/{path.name}: exit {code}")
    assert not accepted and len(CAPTURES) > 40


# -- GPUs named by bus id -----------------------------------------------------------------------------

def dispatching_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> None:
    """An `nvidia-smi` that prints answers[first argument] (the query or the subcommand) and exits 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cases = ""
    for i, (arg, out) in enumerate(answers.items()):
        (tmp_path / f"out{i}").write_text(out)
        cases += f"  {arg}) /bin/cat {tmp_path / f'out{i}'} ;;\n"
    script = bin_dir / "nvidia-smi"
    script.write_text(f'#!/bin/sh\ncase "$1" in\n{cases}  *) exit 9 ;;\nesac\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


# `--query-gpu=index,pci.bus_id --format=csv,noheader` prints "index, bus id" lines (nvidia-smi --help-query-gpu);
# the ids here are the Della H100 node's from its `nvidia-smi -a` capture (tests/fixtures/tool-outputs/nvidia-smi-q).
DELLA_BUS = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
             "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"]
QUERY = "".join(f"{i}, {b}\n" for i, b in enumerate(DELLA_BUS))


def test_bus_ids_parse_and_normalise_to_sysfs_form():
    assert nvsmi.parse_bus_ids(QUERY)[4] == "0000:9a:00.0"
    assert nvsmi.parse_bus_ids("index, pci.bus_id\nNo devices were found\n0, garbage\n") == {}


@pytest.mark.parametrize("name, folder, capture, expect, subject", [
    ("nvlink", "nvlink-status", "3x-rtxa6000-nvlink-s-one-gpu-inactive.txt", {}, "GPU2 (0000:3a:00.0)"),
    ("topo", "nvidia-smi-topo", "3x-rtxa6000-nv4-pair-plus-node-ansi-escapes.txt", {"topology": {"gpu_gpu": "NV4"}},
     "GPU0 (0000:18:00.0)-GPU2 (0000:3a:00.0)"),
    ("numa", "nvidia-smi-topo", "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt", {}, "GPU7 (0000:db:00.0)"),
])
def test_live_probes_name_each_gpu_by_bus_id_beside_its_index(tmp_path, monkeypatch, name, folder, capture, expect,
                                                              subject):
    """`nvlink -s` and `topo -m` print indexes only; a live probe adds nvidia-smi's bus id for each."""
    body = text(folder, capture).split("\n", 2)[2]
    dispatching_stand_in(tmp_path, monkeypatch, {"--query-gpu=index,pci.bus_id": QUERY, "nvlink": body, "topo": body})
    outcome = run_live(get(name), expect)
    assert outcome.outcome in ("passed", "failed"), outcome
    subjects = [v.subject for v in outcome.verdicts]
    assert subject in subjects, subjects
    assert not [s for s in subjects if re.search(r"\bGPU\d+\b(?! \()", s)], subjects  # no index left bare


def test_without_the_bus_id_query_the_verdicts_stand_by_index(tmp_path, monkeypatch):
    body = text("nvlink-status", "a100-sxm4-gpu7-nvlink-s-azure.txt").split("\n", 2)[2]
    dispatching_stand_in(tmp_path, monkeypatch, {"nvlink": body})  # the query exits 9
    outcome = run_live(get("nvlink"), {})
    assert outcome.outcome == "passed" and outcome.verdicts[0].subject == "GPU7"


def test_a_gpu_whose_pcie_link_is_down_or_unreadable_in_sysfs_is_never_passed(tmp_path, monkeypatch):
    """The live pcie-link probe over a sysfs tree as the kernel lays it out (one directory per device, each
    link attribute a file): a GPU at x0 passed as an empty slot, and one without a readable width was left out."""
    from clustercheck.probes import pcie_link

    def device(bdf: str, cls: str, width: str | None, speed: str = "32.0 GT/s PCIe") -> None:
        d = tmp_path / bdf
        d.mkdir()
        files = {"class": cls, "vendor": "0x10de", "device": "0x2330", "current_link_speed": speed,
                 "max_link_speed": "32.0 GT/s PCIe", "current_link_width": width, "max_link_width": "16"}
        for name, value in files.items():
            if value is not None:
                (d / name).write_text(value + "\n")

    device("0000:18:00.0", "0x030200", "16")
    device("0000:2a:00.0", "0x030200", "0", speed="Unknown")  # present, its link down
    device("0000:3a:00.0", "0x030200", None)  # current_link_width unreadable
    device("0000:4a:00.0", "0x020000", "16", speed="Unknown")  # a NIC whose speed the kernel calls Unknown
    device("0000:5a:00.0", "0x030200", "16", speed="Unknown")  # a GPU so: the platform's Gen5 cannot be judged
    device("0000:6a:00.1", "0x020700", "0")  # an SR-IOV virtual function reports x0: its link is its PF's
    (tmp_path / "0000:6a:00.1" / "physfn").symlink_to(tmp_path / "0000:4a:00.0")
    (tmp_path / "0000:00:01.0").mkdir()  # a virtual device: no link attributes at all, not a PCIe link
    (tmp_path / "0000:00:01.0" / "class").write_text("0x030000\n")
    monkeypatch.setattr(pcie_link, "SYSFS", tmp_path)
    found = {v.subject: (v.passed, v.judged, v.detail) for v in run_live(pcie_link.PROBE, {"pcie_gen": 5}).verdicts}
    assert found["0000:18:00.0"][:2] == (True, True)
    assert found["0000:2a:00.0"] == (False, True, "link down: x0 of x16 (class 0302 [10de:2330])")
    assert found["0000:3a:00.0"][:2] == (False, False) and "current_link_width could not be read" in found["0000:3a:00.0"][2]
    assert found["0000:4a:00.0"][:2] == (True, True) and "width judged alone" in found["0000:4a:00.0"][2]
    assert found["0000:5a:00.0"][:2] == (False, False) and "Gen5 cannot be judged" in found["0000:5a:00.0"][2]
    assert "0000:00:01.0" not in found and "0000:6a:00.1" not in found
