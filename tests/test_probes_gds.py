"""gds: gdscheck -p (three GDS versions) and nvidia-fs stats; truncated output is refused as bad input."""

from __future__ import annotations

import dataclasses

import pytest

from clustercheck.probes import gds
from clustercheck.probes.base import ProbeParseError
from evidence import files, ids, text

G = "gdscheck"
FIXTURES = files(G)
EXPECTED = {  # file -> (supported transports, GPUs) ; None: refused
    "gdscheck-p-2xa100pcie-gds1.0-nvme-nvmeof-supported": (["NVMe", "NVMeOF"], 2),
    "gdscheck-p-4x-rtx6000ada-gds1.14-nvme-supported-stelline": (["NVMe"], 4),
    "gdscheck-p-gds1.14-noindent-truncated": None,
    "gdscheck-p-h100pcie-gds1.15-nvme-supported": (["NVMe", "NFS"], 1),
    "proc-driver-nvidia-fs-stats-stelline": "stats",
    # cut after DRIVER CONFIGURATION, and what it shows already fails: judged, not refused
    "gdscheck-p-driver-configuration-all-unsupported": "fails",
    "gdscheck-p-gds1.18-all-compat-no-gpu": "fails",
}


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture(path):
    want = EXPECTED[path.stem]
    if want is None:
        with pytest.raises(ProbeParseError, match="incomplete"):
            gds.parse(path.read_text())
        return
    parsed = gds.parse(path.read_text())
    if want == "fails":
        assert isinstance(parsed, gds.GdsCheck) and not parsed.complete
        verdicts = gds.judge(parsed, {})
        failed = [v.what for v in verdicts if v.judged and not v.passed]
        assert "storage transport" in failed and not any(v.passed for v in verdicts)
        assert [v.what for v in verdicts if not v.judged][-1] == "platform verification"
        return
    if want == "stats":
        assert isinstance(parsed, gds.NvfsStats) and dict(parsed.ops)["Read"] == 0
    else:
        assert [t for t, v in parsed.transports if v == "Supported"] == want[0]
        assert len(parsed.gpus) == want[1] and parsed.verification == "Platform verification succeeded"
    assert all(v.passed for v in gds.judge(parsed, {}))


def test_no_supported_transport_fails():
    raw = text(G, "gdscheck-p-h100pcie-gds1.15-nvme-supported.txt").replace(": Supported", ": Unsupported")
    failed = [v for v in gds.judge(gds.parse(raw), {}) if not v.passed]
    assert [(v.subject, v.what) for v in failed] == [("gdscheck", "storage transport")]


def test_compat_mode_fails_only_when_the_platform_forbids_it():
    parsed = gds.parse(text(G, "gdscheck-p-h100pcie-gds1.15-nvme-supported.txt"))  # use_compat_mode : true
    assert all(v.passed for v in gds.judge(parsed, {}))
    failed = [v for v in gds.judge(parsed, {"gds_compat_mode": False}) if not v.passed]
    assert [v.subject for v in failed] == ["cufile.json"]


def test_nvfs_error_counter_fails():
    raw = text(G, "proc-driver-nvidia-fs-stats-stelline.txt").replace("Reads                : err=0", "Reads                : err=7")
    verdict = gds.judge(gds.parse(raw), {})[0]
    assert not verdict.passed and "Reads err=7" in verdict.detail


def test_unrelated_text_is_a_parse_error():
    with pytest.raises(ProbeParseError):
        gds.parse("NVMe : Supported\n")


def test_a_node_without_gds_is_skipped_unless_gds_true_expects_it():
    """`gds: true` (GPUDirect Storage must be usable) was an expectation key nothing read: a node without
    nvidia_fs and gdscheck was skipped whatever it said. Now it fails there, and is skipped without it."""
    from clustercheck.probes import run_live
    from clustercheck.probes.base import ProbeSkip

    absent = gds.Absent("GPUDirect Storage is not installed: no nvidia_fs module and no gdscheck")
    with pytest.raises(ProbeSkip, match="not installed"):
        gds.judge(absent, {})
    (v,) = gds.judge(absent, {"gds": True})
    assert not v.passed and v.judged and "expected: usable (gds: true)" in v.detail
    probe = dataclasses.replace(gds.PROBE, collect=lambda: absent)  # this machine's answer, wherever it runs
    assert run_live(probe, {"gds": True}).outcome == "failed"
    assert run_live(probe, {}).outcome == "skipped"
