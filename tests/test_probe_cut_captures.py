"""A capture cut off inside its last block is never judged on what is left: the device or port whose block
the cut went through is `not judged`, named, not silently dropped (pci-acs) or passed (ib); the whole real
captures read as before. Derived inputs are the real fixtures with one small, stated edit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clustercheck.probes import pci_acs
from evidence import TOOLS

REPO = Path(__file__).resolve().parent.parent
PLX = TOOLS / "lspci-acs" / "plx-pex8749-downstream-ports-acs-redirect-enabled-n1sdp.txt"


def cc(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def _plx_cut() -> str:
    """Lines 1-100 of the PLX capture (it stops inside 0000:02:10.0's block, before its ACS capability), with
    line 74, 0000:02:08.0's ACSCtl, set to redirect off: the one device read in full passes."""
    lines = PLX.read_text().splitlines()[:100]
    assert lines[73].strip().startswith("ACSCtl:") and lines[93].startswith("0000:02:10.0 ")
    lines[73] = "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-"
    return "\n".join(lines) + "\n"


def test_lspci_cut_inside_the_last_block_names_that_device_not_judged(tmp_path):
    verdicts = pci_acs.judge(pci_acs.parse(_plx_cut()), {})
    assert [(v.subject, v.word) for v in verdicts] == [("0000:02:08.0", "PASS"), ("0000:02:10.0", "NOT JUDGED")]
    assert "capture cut in its block" in verdicts[1].detail
    cut = tmp_path / "lspci-cut.txt"
    cut.write_text(_plx_cut())
    out = cc("probe", "pci-acs", "--input", str(cut))
    assert out.returncode == 3, out.stdout + out.stderr  # part judged, part not: an error, never a pass
    assert "0000:02:10.0" in out.stdout + out.stderr


def test_lspci_whole_captures_read_as_before():
    """Every device block of the real captures ends (driver line, hex dump or blank line): none is cut."""
    for path in sorted((TOOLS / "lspci-acs").glob("*.txt")):
        assert not any(d.cut for d in pci_acs.parse(path.read_text()).devices), path.name


IBSTAT = TOOLS / "ibstat" / "2x-connectx3-mlx4-dualport-fdr56-active.txt"


def test_ibstat_cut_inside_its_last_port_section_names_that_port_not_judged(tmp_path):
    """`head -n 48` of the real capture ends at mlx4_1's `Port 2:` / `State: Active`: that port was not read."""
    cut = tmp_path / "ibstat-head-48.txt"
    cut.write_text("\n".join(IBSTAT.read_text().splitlines()[:48]) + "\n")
    assert cut.read_text().rstrip().endswith("State: Active")
    out = cc("probe", "ib", "--input", str(cut))
    assert out.returncode == 3, out.stdout + out.stderr  # three ports passed, one not judged: never a pass
    assert "NOT JUDGED mlx4_1/2: port state: not judged: port section cut" in out.stdout
    whole = cc("probe", "ib", "--input", str(IBSTAT))
    assert whole.returncode == 0 and whole.stdout.count("PASS ") == 4, whole.stdout
