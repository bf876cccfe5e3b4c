"""A `counters:` allowance names a counter the readers give, or a dotted prefix of one. A misspelled one
(`pcie.aer.corectable`) used to be accepted because only its family was checked: it never applied, and the
counter meant stayed at its built-in allowance with no word. `platforms show` lists the allowances in force."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.counters import kernel_log, sysfs
from clustercheck.counters.allowances import DEFAULTS, names_a_counter
from clustercheck.errors import UserError
from clustercheck.judging.thresholds import load_profile
from test_counters import IB_MLX5, aer_tree, body, ib_tree
from test_counters_sysfs import RAS, drm_tree

LOGS = Path(__file__).resolve().parent / "fixtures" / "kernel-log"


def profile_with(tmp_path: Path, entries: str) -> Path:
    path = tmp_path / "lab.yaml"
    path.write_text(f"platform: lab\ndetect: {{gpu_count: 0}}\ncounters:\n{entries}")
    return path


@pytest.mark.parametrize("typo, meant", [("pcie.aer.corectable", "pcie.aer.correctable"),
                                         ("gpu.ecc.uncorected", "gpu.ecc.uncorrected"),
                                         ("ib.symbol_errors", "ib.symbol_error"),
                                         ("kernel.xid.foo", None),                  # an Xid is a number
                                         ("pcie.aer.correctable.RxErr", None)])     # longer than any counter
def test_a_name_no_counter_has_is_refused_with_a_hint(tmp_path: Path, typo: str, meant: str | None) -> None:
    path = profile_with(tmp_path, f"  kernel.xid.43: {{allow: 5, source: s}}\n  {typo}: {{allow: 100, source: s}}\n")
    with pytest.raises(UserError) as info:
        load_profile(path)
    text = str(info.value)
    assert text.startswith(f"{path}:5: counters.{typo}: no counter {typo!r}") and "\n" not in text
    if meant:
        assert text.endswith(f"did you mean {meant!r}?")


@pytest.mark.parametrize("name", ["pcie", "pcie.aer", "pcie.aer.correctable", "pcie.aer.rootport.fatal",
                                  "kernel.xid", "kernel.xid.79", "kernel.sxid.12", "kernel.edac.ue", "nvlink",
                                  "nvlink.crc_flit", "gpu.remap.pending", "ib.link_downed", "amdgpu.ce",
                                  "amdgpu.ce.umc", "cpu.throttle.package", *sorted(DEFAULTS)])
def test_counters_and_their_prefixes_are_accepted(tmp_path: Path, name: str) -> None:
    profile = load_profile(profile_with(tmp_path, f"  {name}: {{allow: 3, source: s}}\n"))
    assert profile.counters[name].allowed(60) == 3


def test_every_counter_the_readers_give_from_real_captures_is_a_name_an_allowance_may_use(tmp_path: Path) -> None:
    """The name table must not drift from the readers: AER from the kernel's sample, an mlx5 port's counters,
    an amdgpu RAS tree, and every kernel log capture."""
    names = {c.name for c in sysfs.aer(aer_tree(tmp_path / "pci")).counters}
    names |= {c.name for c in sysfs.ib(ib_tree(tmp_path / "ib", IB_MLX5)).counters}
    names |= {c.name for c in sysfs.amdgpu(drm_tree(tmp_path / "sys", RAS)).counters}
    for log in sorted(LOGS.iterdir()):
        text = "\n".join(body(log))
        lines = kernel_log.parse_kmsg(text) + kernel_log.parse_dmesg(text)
        names |= {line.counter for line in lines if line.kind}
    assert {n.split(".")[0] for n in names} >= {"pcie", "ib", "amdgpu", "kernel"}
    assert len(names) > 10
    assert [n for n in sorted(names) if not names_a_counter(n)] == []


def test_platforms_show_lists_the_allowances_in_force(tmp_path: Path) -> None:
    (tmp_path / "th").mkdir()
    profile_with(tmp_path / "th", "  kernel.xid.43: {allow: 5, source: \"our jobs raise Xid 43\"}\n"
                                  "  pcie.aer.correctable: {allow: 2/min, source: ours}\n")
    out = subprocess.run([sys.executable, "-m", "clustercheck", "platforms", "show", "lab", "--thresholds", "th"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "    kernel.xid.43 <= 5 (th/lab.yaml:4)" in lines
    assert "    pcie.aer.correctable <= 2/min (th/lab.yaml:5)" in lines
    assert "    gpu.ecc.uncorrected <= 0 (built in)" in lines  # the built-in ones stay in force
    assert "        source: our jobs raise Xid 43" in lines
