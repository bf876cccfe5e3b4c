"""Live probes run their tools through probes/tool.py and fail closed: a tool that printed its report and then
died is an error naming the command and how it died, never a pass judged on the partial output."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from clustercheck.probes import gds, get, pci_acs, run_live, tool
from evidence import TOOLS


def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> Path:
    """An executable `name` (a shell script running `body`) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return script


GDSCHECK_OK = TOOLS / "gdscheck" / "gdscheck-p-h100pcie-gds1.15-nvme-supported.txt"
LSPCI_OK = TOOLS / "lspci-acs" / "cx7-endpoint-21-00.0-acs-all-minus.txt"


@pytest.mark.parametrize("death, how", [("kill -SEGV $$", "was killed by SIGSEGV"),
                                        ("echo 'cuFile error' >&2; exit 1", "exited with status 1")])
def test_a_gdscheck_that_printed_a_passing_report_then_died_is_an_error(tmp_path, monkeypatch, death, how):
    fake_tool(tmp_path, monkeypatch, "gdscheck", f"/bin/cat {GDSCHECK_OK}\n{death}")
    monkeypatch.setattr(gds, "GDSCHECK", tmp_path / "no-cuda" / "gdscheck")
    outcome = run_live(get("gds"), {})
    assert outcome.outcome == "error", outcome
    assert "gdscheck -p`" in outcome.reason and how in outcome.reason


def test_a_gdscheck_that_succeeds_is_judged(tmp_path, monkeypatch):
    """The stand-in above is sound: the same report from a tool that exits 0 is judged (and passes)."""
    fake_tool(tmp_path, monkeypatch, "gdscheck", f"/bin/cat {GDSCHECK_OK}")
    monkeypatch.setattr(gds, "GDSCHECK", tmp_path / "no-cuda" / "gdscheck")
    assert run_live(get("gds"), {}).outcome == "passed"


@pytest.mark.parametrize("death, how", [("kill -SEGV $$", "was killed by SIGSEGV"),
                                        ("echo 'pcilib: Cannot open config' >&2; exit 1", "exited with status 1")])
def test_an_lspci_that_printed_clean_acs_then_died_is_an_error(tmp_path, monkeypatch, death, how):
    fake_tool(tmp_path, monkeypatch, "lspci", f"/bin/cat {LSPCI_OK}\n{death}")
    with pytest.raises(tool.ToolError, match=rf"`lspci -vvv` {how}"):
        pci_acs._lspci_fallback("reading PCIe extended config space needs root")


def test_an_lspci_fallback_that_succeeds_returns_its_text_and_access_denied_still_skips(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "lspci", f"/bin/cat {LSPCI_OK}")
    assert pci_acs._lspci_fallback("why") == LSPCI_OK.read_text()
    fake_tool(tmp_path, monkeypatch, "lspci", "echo '00:01.0 PCI bridge: x'; echo '\tCapabilities: <access denied>'")
    with pytest.raises(pci_acs.ProbeSkip, match="access denied"):
        pci_acs._lspci_fallback("why")


# -- pci-acs live: a PCIe device whose extended config space sysfs does not give ------------------------------

def _config(pcie: bool, size: int, acs_ctl: int | None = None) -> bytes:
    """A type-1 header with a power-management capability at 0x40 and, where `pcie`, the PCI Express
    capability (ID 0x10) after it at 0x50; `acs_ctl` adds an ACS extended capability at 0x100."""
    config = bytearray(size)
    config[0x00:0x04] = (0x10DE).to_bytes(2, "little") + (0x1AD0).to_bytes(2, "little")
    config[0x06] = 0x10                            # Status: capabilities list present
    config[0x34] = 0x40
    config[0x40:0x42] = bytes([0x01, 0x50 if pcie else 0x00])
    if pcie:
        config[0x50:0x52] = bytes([0x10, 0x00])
    if acs_ctl is not None:
        config[0x100:0x104] = (0x0001_000D).to_bytes(4, "little")   # ACS, version 1, no next
        config[0x106:0x108] = acs_ctl.to_bytes(2, "little")
    return bytes(config)


def acs_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configs: dict[str, bytes]) -> None:
    """A sysfs tree of PCI bridges below one host bridge (tests/sysfs_tree.py), each with the given config."""
    from sysfs_tree import Dev, Tree

    tree = Tree({bdf: Dev(bdf, "PCI bridge", "pci0000:00", files={"class": "0x060400", "vendor": "0x10b5",
                                                                     "device": "0x8747"}) for bdf in configs})
    root = tree.write(tmp_path / "sys")
    for bdf, config in configs.items():
        (root / "bus" / "pci" / "devices" / bdf / "config").write_bytes(config)
    monkeypatch.setattr(pci_acs, "SYSFS", root / "bus" / "pci" / "devices")


def test_a_pcie_bridge_whose_extended_config_space_is_unreadable_is_not_judged_by_bdf(tmp_path, monkeypatch):
    acs_sysfs(tmp_path, monkeypatch, {"0000:00:01.0": _config(pcie=True, size=256)})
    outcome = run_live(get("pci-acs"), {})
    assert outcome.outcome == "not judged", outcome
    [verdict] = outcome.verdicts
    assert verdict.subject == "0000:00:01.0"
    assert "PCIe extended config space not readable: ACS state unknown" in verdict.detail


def test_one_unreadable_bridge_beside_a_clean_one_is_never_a_pass(tmp_path, monkeypatch):
    """Judged in part, the rest not: an error (probes/base.py outcome_of) naming the unread bridge."""
    acs_sysfs(tmp_path, monkeypatch, {"0000:00:01.0": _config(pcie=True, size=4096, acs_ctl=0x0001),
                                      "0000:00:02.0": _config(pcie=True, size=256)})
    outcome = run_live(get("pci-acs"), {})
    assert outcome.outcome == "error" and "0000:00:02.0" in outcome.reason, outcome
    assert {v.subject: v.word for v in outcome.verdicts} == {"0000:00:01.0": "PASS", "0000:00:02.0": "NOT JUDGED"}


@pytest.mark.parametrize("pcie, size", [(True, 4096), (False, 256)], ids=["pcie-4096-bytes", "conventional-pci"])
def test_a_readable_bridge_without_acs_still_passes(tmp_path, monkeypatch, pcie, size):
    """The controls: a full 4 KiB config without ACS, and a conventional PCI device (no extended space at all)."""
    acs_sysfs(tmp_path, monkeypatch, {"0000:00:01.0": _config(pcie=pcie, size=size)})
    assert run_live(get("pci-acs"), {}).outcome == "passed"


def test_the_standard_capability_walk_finds_pcie_only_in_the_list():
    assert pci_acs.is_pcie(_config(pcie=True, size=256))
    assert not pci_acs.is_pcie(_config(pcie=False, size=256))
    looped = bytearray(_config(pcie=False, size=256))
    looped[0x41] = 0x40                            # a list that points at itself ends, not loops
    assert not pci_acs.is_pcie(bytes(looped))


# -- a tool on PATH that cannot be executed is installed and broken, not absent -------------------------------

def _not_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / name
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    monkeypatch.setenv("PATH", str(bin_dir))
    return script


def test_a_non_executable_nvidia_smi_is_an_error_naming_where_it_is_never_no_driver(tmp_path, monkeypatch):
    script = _not_executable(tmp_path, monkeypatch, "nvidia-smi")
    outcome = run_live(get("nvlink"), {})
    assert outcome.outcome == "error", outcome
    assert f"`nvidia-smi` is at {script} but not executable" in outcome.reason


def test_a_non_executable_tool_exits_3_from_the_cli(tmp_path, monkeypatch, capsys):
    from clustercheck.cli import main

    _not_executable(tmp_path, monkeypatch, "nvidia-smi")
    assert main(["probe", "nvlink"]) == 3
    assert "but not executable" in capsys.readouterr().out


def test_tool_run_of_a_non_executable_file_is_a_tool_error_and_of_none_a_skip(tmp_path, monkeypatch):
    script = _not_executable(tmp_path, monkeypatch, "gdscheck")
    with pytest.raises(tool.ToolError, match="but not executable"):
        tool.run(["gdscheck", "-p"], missing="absent")
    with pytest.raises(tool.ToolError, match="but not executable"):
        tool.run([str(script), "-p"], missing="absent")
    with pytest.raises(tool.ProbeSkip, match="absent"):
        tool.run(["no-such-tool-here"], missing="absent")


# -- a runaway tool: output read with a cap, and a timeout that kills what the tool started ----------------

def test_a_tool_printing_more_than_64_mib_is_stopped_with_an_error(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "nvidia-smi", 'yes "GPU 00000000:19:00.0" | head -c 70000000')
    with pytest.raises(tool.ToolError, match=r"`nvidia-smi -q` printed more than 64 MiB"):
        tool.run(["nvidia-smi", "-q"], missing="absent")


def test_the_output_cap_is_the_input_cap():
    from clustercheck.probes import cli

    assert tool.MAX_OUTPUT == cli.MAX_INPUT == 64 << 20


def test_a_tool_just_under_the_cap_is_read_whole(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "nvidia-smi", f"head -c {tool.MAX_OUTPUT} /dev/zero | tr '\\0' x; echo 'oops' >&2")
    assert len(tool.run(["nvidia-smi"], missing="absent")) == tool.MAX_OUTPUT


def _gone(pid: int) -> bool:
    """No such process, or a zombie left for init to reap (a container's init may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_a_timeout_kills_the_tools_children_too(tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    fake_tool(tmp_path, monkeypatch, "gdscheck", f"sleep 1000 &\necho $! > {pidfile}\nwait")
    with pytest.raises(tool.ToolError, match=r"`gdscheck -p` did not finish within 3 s"):
        tool.run(["gdscheck", "-p"], missing="absent", timeout=3)
    pid = int(pidfile.read_text())
    # SIGKILL is sent before run returns, but the child dies when next scheduled: look again for a while
    # (a bound for a slow machine, not a speed asserted)
    for _ in range(200):
        if _gone(pid):
            break
        time.sleep(0.05)
    try:
        assert _gone(pid), f"the tool's child {pid} outlived the timeout"
    finally:
        if not _gone(pid):
            os.kill(pid, 9)


def test_a_tool_that_closes_its_output_and_lingers_is_a_timeout(tmp_path, monkeypatch):
    fake_tool(tmp_path, monkeypatch, "gdscheck", "exec >/dev/null 2>&1\nsleep 1000")
    with pytest.raises(tool.ToolError, match="did not finish within 1 s"):
        tool.run(["gdscheck"], missing="absent", timeout=1)
