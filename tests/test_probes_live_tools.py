"""Live probes run their tools through probes/tool.py and fail closed: a tool that printed its report and then
died is an error naming the command and how it died, never a pass judged on the partial output."""

from __future__ import annotations

import os
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
