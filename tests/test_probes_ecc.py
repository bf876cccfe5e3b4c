"""ecc: both nvidia-smi SRAM layouts (one 'SRAM Uncorrectable' counter, or Parity / SEC-DED / Threshold
Exceeded), unreadable counters, and the NVML path live, driven through a stand-in pynvml (no GPU here)."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from clustercheck.cli import main
from clustercheck.probes import ecc, ecc_nvml, nvsmi
from clustercheck.probes import get, run_live
from clustercheck.probes.base import ProbeParseError, ProbeSkip
from evidence import TOOLS, text

Q = "nvidia-smi-q"
A10G = "a10g-535.247-nvidia-smi-q-sram-parity-secded-layout-dcgm232.txt"   # split layout, real capture
H100 = "h100-80gb-hbm3-nvidia-smi-a-della.txt"                              # one-counter layout, real capture
PAD = " " * 14  # nvidia-smi pads keys to one column


def _set(raw: str, scope: str, key: str, value: str) -> str:
    """Change one counter under ECC Errors/<scope> (the first such key after the scope line)."""
    head, sep, tail = raw.partition(f"        {scope}\n")
    line = next(l for l in tail.splitlines() if l.strip().startswith(key + " ") or l.strip().startswith(key + ":"))
    assert line in tail
    return head + sep + tail.replace(line, line.split(":")[0] + ": " + value, 1)


def _verdict(raw: str) -> Any:
    (verdict,) = ecc.judge(ecc.parse(raw), {})
    return verdict


def test_the_split_layout_capture_is_clean():
    v = _verdict(text(Q, A10G))
    assert v.passed and v.detail == "clean (row remap, volatile ECC, aggregate ECC)"


@pytest.mark.parametrize("scope, key, value, said", [
    ("Volatile", "SRAM Uncorrectable Parity", "3", "volatile SRAM Uncorrectable Parity = 3"),
    ("Volatile", "SRAM Uncorrectable SEC-DED", "1", "volatile SRAM Uncorrectable SEC-DED = 1"),
    ("Aggregate", "SRAM Uncorrectable Parity", "7", "aggregate SRAM Uncorrectable Parity = 7"),
    ("Aggregate", "SRAM Threshold Exceeded", "Yes", "aggregate SRAM error threshold exceeded"),
    ("Aggregate", "DRAM Uncorrectable", "Unknown Error", "counter unreadable: ECC Errors/Aggregate/DRAM Uncorrectable"),
])
def test_split_layout_errors_fail(scope, key, value, said):
    v = _verdict(_set(text(Q, A10G), scope, key, value))
    assert not v.passed and said in v.detail, v.detail


@pytest.mark.parametrize("scope, key, named", [
    ("Volatile", "SRAM Uncorrectable Parity", "ECC Errors/Volatile/SRAM Uncorrectable Parity"),
    ("Aggregate", "DRAM Uncorrectable", "ECC Errors/Aggregate/DRAM Uncorrectable"),
    ("Aggregate", "SRAM Threshold Exceeded", "ECC Errors/Aggregate/SRAM Threshold Exceeded"),
])
def test_one_na_counter_among_read_ones_is_not_judged_naming_gpu_and_counter(scope, key, named):
    v = _verdict(_set(text(Q, A10G), scope, key, "N/A"))
    assert v.word == "NOT JUDGED" and v.subject.startswith("GPU0 ") and named in v.detail, v.detail


def test_a_remap_or_retired_page_counter_read_na_among_read_ones_is_not_judged():
    raw = text(Q, H100)
    remap = raw.replace("        Uncorrectable Error               : 0\n", "        Uncorrectable Error               : N/A\n")
    assert remap != raw and "Remapped Rows/Uncorrectable Error" in _verdict(remap).detail
    assert _verdict(remap).word == "NOT JUDGED"
    pages = text(Q, "azure-8gpu-nvidia-smi-q-retired-pages-excerpt.txt")
    line = "        Double Bit ECC                    : 0\n"
    verdicts = ecc.judge(ecc.parse(pages.replace(line, line.replace(": 0", ": N/A"), 1)), {})
    assert [v.word for v in verdicts if v.what == "ECC and row remap"][:2] == ["NOT JUDGED", "PASS"]


def test_counters_the_gpu_does_not_have_stay_clean():
    """A V100 prints N/A for its texture and single-bit CBU counters, which no rule here judges."""
    raw = text(Q, "v100-sxm2-power9-nvidia-smi-q-traverse-partial.txt")
    assert "Texture Memory      : N/A" in raw
    (v,) = [v for v in ecc.judge(ecc.parse(raw), {}) if v.what == "ECC and row remap"]
    assert v.passed and v.judged and v.detail == "clean (volatile ECC, aggregate ECC, retired pages)"


def test_aggregate_sram_errors_name_where_they_were():
    raw = _set(text(Q, A10G), "Aggregate", "SRAM Uncorrectable SEC-DED", "2")
    raw = raw.replace("SRAM L2                       : 0", "SRAM L2                       : 2")
    assert "aggregate SRAM Uncorrectable SEC-DED = 2 (in L2 2)" in _verdict(raw).detail


def test_h100_capture_rewritten_to_the_split_layout_is_judged_by_the_new_keys():
    """The H100 capture with each 'SRAM Uncorrectable' line replaced by the two lines of the newer layout:
    the old single key is gone, so only the new keys can make it fail."""
    raw = text(Q, H100)
    old = "            SRAM Uncorrectable            : 0\n"
    assert raw.count(old) == 2
    split = raw.replace(old, f"            SRAM Uncorrectable Parity     : 0\n            SRAM Uncorrectable SEC-DED    : 0\n")
    assert "SRAM Uncorrectable  " not in split and _verdict(split).passed
    bad = split.replace("SRAM Uncorrectable SEC-DED    : 0", "SRAM Uncorrectable SEC-DED    : 4", 1)
    v = _verdict(bad)
    assert not v.passed and "volatile SRAM Uncorrectable SEC-DED = 4" in v.detail


def test_an_ecc_mode_nvidia_smi_could_not_read_fails_naming_the_gpu(tmp_path, capsys):
    """`ECC Mode/Current` lies outside the counter sections: 'Unknown Error' there must not read as ECC on."""
    raw = text(Q, A10G)
    line = "        Current                           : Enabled\n"
    assert raw.count(line) == 1
    f = tmp_path / "q.txt"
    f.write_text(raw.replace(line, line.replace("Enabled", "Unknown Error")))
    assert main(["probe", "ecc", "--input", str(f)]) == 1
    assert "FAIL GPU0 (0000:00:1e.0): ECC and row remap: counter unreadable: ECC Mode/Current = 'Unknown Error'" \
        in capsys.readouterr().out


def test_a_gpu_without_ecc_counters_is_a_skip_and_says_why(tmp_path, capsys):
    raw = text(Q, A10G)
    section = raw[raw.index("    ECC Mode\n"):raw.index("    Temperature\n")]
    blank = "\n".join(l.split(":")[0] + ": N/A" if ":" in l else l for l in section.splitlines()) + "\n"
    with pytest.raises(ProbeSkip, match="no GPU reports ECC counters"):
        ecc.judge(ecc.parse(raw.replace(section, blank)), {})
    f = tmp_path / "q.txt"
    f.write_text(raw.replace(section, blank))
    assert main(["probe", "ecc", "--input", str(f)]) == 5 and capsys.readouterr().out.startswith("SKIPPED: no GPU")


# -- NVML, live ----------------------------------------------------------------------------------

def fake_nvml(sram: dict[str, int] | None, lost: int | None = None, sram_call_fails: bool = False) -> SimpleNamespace:
    """pynvml's own constants, struct and error class; only the calls into the driver are stood in for.
    sram=None answers NOT_SUPPORTED for the SRAM status struct (drivers without it)."""
    nv = SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith(("NVML_", "c_nvml"))})
    nv.NVMLError = pynvml.NVMLError
    unsupported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def sram_status(h: int, ref: Any) -> int:
        if sram_call_fails:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if sram is None:
            raise unsupported
        for field, value in sram.items():
            setattr(ref._obj, field, value)
        return pynvml.NVML_SUCCESS

    def handle(i: int) -> int:
        if i == lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i

    def raise_unsupported(*_: Any) -> Any:
        raise unsupported

    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = handle
    nv.nvmlDeviceGetPciInfo = lambda h: SimpleNamespace(busId=f"00000000:{0x19 + h:02X}:00.0".encode())
    nv.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    nv.nvmlDeviceGetEccMode = lambda h: [pynvml.NVML_FEATURE_ENABLED] * 2
    nv.nvmlDeviceGetSramEccErrorStatus = sram_status
    nv.nvmlDeviceGetMemoryErrorCounter = lambda h, err, counter, where: (
        5 if (h, err, where) == (1, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_MEMORY_LOCATION_SRAM) else 0)
    nv.nvmlDeviceGetRemappedRows = lambda h: (0, 0, 0, 0)
    nv.nvmlDeviceGetRetiredPages = nv.nvmlDeviceGetRetiredPagesPendingStatus = raise_unsupported
    return nv


def test_nvml_sram_status_struct_becomes_a_failed_verdict(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({"volatileUncSecDed": 2, "aggregateUncSecDed": 2}))
    report = ecc_nvml.read()
    assert [g.bus_id for g in report.gpus] == ["00000000:19:00.0", "00000000:1A:00.0"]
    assert report.gpus[0].get("ECC Errors/Volatile/SRAM Uncorrectable SEC-DED") == "2"
    verdicts = ecc.judge(report, {})
    assert [v.passed for v in verdicts] == [False, False]
    assert "volatile SRAM Uncorrectable SEC-DED = 2" in verdicts[0].detail


def test_nvml_without_the_struct_reads_the_sram_counter(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(None))
    verdicts = ecc.judge(ecc_nvml.read(), {})
    assert [v.passed for v in verdicts] == [True, False]
    assert "SRAM Uncorrectable = 5" in verdicts[1].detail


def test_nvml_failing_the_sram_call_is_an_unreadable_counter(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({}, sram_call_fails=True))
    verdicts = ecc.judge(ecc_nvml.read(), {})
    assert not any(v.passed for v in verdicts) and "counter unreadable" in verdicts[0].detail


def test_nvml_failing_the_ecc_mode_call_is_an_unreadable_mode(monkeypatch):
    """nvmlDeviceGetEccMode failing with anything but NOT_SUPPORTED, every counter clean: ECC may be off."""
    nv = fake_nvml(None)
    nv.nvmlDeviceGetMemoryErrorCounter = lambda *_: 0

    def mode_fails(h: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    nv.nvmlDeviceGetEccMode = mode_fails
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    outcome = run_live(get("ecc"), {})
    assert outcome.outcome == "failed" and [v.subject for v in outcome.failures] == [
        "GPU0 (0000:19:00.0)", "GPU1 (0000:1a:00.0)"]
    assert "counter unreadable: ECC Mode/Current = 'Unknown Error" in outcome.failures[0].detail
    nv.nvmlDeviceGetEccMode = lambda h: [7, 7]  # a state NVML does not define is no "Disabled" or "Enabled"
    assert "ECC Mode/Current = 'unknown state 7'" in run_live(get("ecc"), {}).failures[0].detail


def test_a_gpu_nvml_cannot_reach_is_an_error_not_a_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml({}, lost=1))
    outcome = run_live(get("ecc"), {})
    assert outcome.outcome == "error" and "nvmlDeviceGetHandleByIndex(1)" in outcome.reason


def test_nvml_that_starts_and_lists_no_gpu_is_an_error_never_gpus_without_ecc(monkeypatch, capsys):
    nv = fake_nvml(None)
    nv.nvmlDeviceGetCount = lambda: 0
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    outcome = run_live(get("ecc"), {"gpu_count": 8})
    assert outcome.outcome == "error" and "nvmlDeviceGetCount lists no GPU" in outcome.reason, outcome.reason
    assert main(["probe", "ecc", "--platform", "cpu"]) == 3
    out = capsys.readouterr().out
    assert "ERROR: ecc: ToolError: NVML started (driver 550.54.15) but nvmlDeviceGetCount lists no GPU" in out, out
    with pytest.raises(ProbeParseError, match="no GPU listed"):  # nor from any other reader's empty report
        ecc.judge(nvsmi.NvsmiReport((("Driver Version", "550.54.15"),), ()), {})


def test_live_prefers_nvml_over_the_text(monkeypatch, tmp_path):
    """nvidia-smi (a stand-in printing the clean A10G capture) would say clean; NVML says SEC-DED errors."""
    monkeypatch.setenv("PATH", _stand_in(tmp_path, TOOLS / Q / A10G))
    sram_bad = nvsmi.NvsmiReport((), (nvsmi.NvsmiGpu("00000000:19:00.0", 0, (
        ("ECC Errors/Volatile/SRAM Uncorrectable SEC-DED", "1"),)),))
    monkeypatch.setattr(ecc, "read_nvml", lambda: sram_bad)
    outcome = run_live(get("ecc"), {})
    assert outcome.outcome == "failed" and "SEC-DED = 1" in outcome.failures[0].detail

    def no_nvml() -> nvsmi.NvsmiReport:
        raise ecc_nvml.NvmlUnavailable("no driver")

    monkeypatch.setattr(ecc, "read_nvml", no_nvml)
    outcome = run_live(get("ecc"), {})
    assert outcome.outcome == "passed" and outcome.verdicts[0].subject == "GPU0 (0000:00:1e.0)"


def _stand_in(tmp_path: Any, capture: Any) -> str:
    """A PATH whose first directory holds an `nvidia-smi` printing a capture (without its source line)."""
    body = capture.read_text().split("\n", 2)[2]
    (tmp_path / "out.txt").write_text(body)
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nexec /bin/cat {tmp_path / 'out.txt'}\n")
    script.chmod(0o755)
    import os

    return f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}"
