"""nvlink: nvidia-smi nvlink -s fixtures; dead GPUs, inactive links among active ones, slow links and elided
captures fail without any expectation; a bridged PCIe pair passes once the platform says 12 links."""

from __future__ import annotations

import pytest

from clustercheck.cli import main
from clustercheck.probes import nvlink
from clustercheck.probes.base import ProbeParseError
from evidence import files, ids, text

NV = "nvlink-status"
FIXTURES = files(NV)
H100_PCIE = "2x-h100pcie-nvlink-bridge-12-of-18-active-hpe-dl380a.txt"
A100 = "a100-sxm4-gpu7-nvlink-s-azure.txt"
EXPECTED = {  # file -> (active links per GPU index, GPUs failing without any expectation)
    "2x-h100pcie-nvlink-bridge-12-of-18-active-hpe-dl380a": ({0: 12, 1: 12}, {0, 1}),
    "3x-rtxa6000-nvlink-s-one-gpu-inactive": ({0: 4, 1: 4, 2: 0}, {2}),
    "a100-sxm4-gpu6-all-links-inactive-azure": ({6: 0}, {6}),
    "a100-sxm4-gpu7-nvlink-s-azure": ({7: 12}, set()),
    # GPU 0-2 were elided by the author ('....'); GPU3's two inactive links fail whatever was left out
    "v100-sxm2-gpu3-links-3-5-inactive-leading-elision": ({3: 4}, {3}),
}


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture_parses_active_links(path):
    report = nvlink.parse(path.read_text())
    active, failing = EXPECTED[path.stem]
    assert {g.index: g.active for g in report.gpus} == active
    verdicts = nvlink.judge(report, {})
    assert {v.subject for v in verdicts if v.judged and not v.passed} == {f"GPU{i}" for i in failing}


def test_the_issue_input_all_inactive_gpu_fails_through_the_cli(tmp_path, capsys):
    f = tmp_path / "f"
    f.write_text("GPU 0: A (UUID: a)\n\t Link 0: <inactive>\n")  # printf from the issue, byte for byte
    assert main(["probe", "nvlink", "--input", str(f)]) == 1
    assert "FAIL GPU0: active NVLinks: no active NVLink" in capsys.readouterr().out


def test_a100_with_12_links_passes_a100_and_fails_an_18_link_platform():
    gpus = nvlink.parse(text(NV, A100))
    assert nvlink.judge(gpus, {"nvlinks_per_gpu": 12})[0].passed
    verdict = nvlink.judge(gpus, {"nvlinks_per_gpu": 18})[0]
    assert not verdict.passed and verdict.measured == 12 and verdict.expected == 18


@pytest.mark.parametrize("want", [4, 0])
def test_more_active_links_than_the_platform_has_fail(want):
    """12 links up where the platform has 4 (a bridged pair) or none: not the platform's GPU or board."""
    (verdict,) = nvlink.judge(nvlink.parse(text(NV, A100)), {"nvlinks_per_gpu": want})
    assert not verdict.passed and verdict.subject == "GPU7"
    assert f"12 active link(s); platform expects {want}" in verdict.detail and verdict.expected == want


def test_one_inactive_link_among_active_fails_without_expectation():
    raw = text(NV, A100).replace("Link 5: 25 GB/s", "Link 5: <inactive>")
    (verdict,) = nvlink.judge(nvlink.parse(raw), {})
    assert not verdict.passed and "link 5 inactive among 11 active" in verdict.detail
    (verdict,) = nvlink.judge(nvlink.parse(raw), {"nvlinks_per_gpu": 12})
    assert not verdict.passed and "11 active link(s); platform expects 12" in verdict.detail


def test_bridged_h100_pcie_pair_fails_without_expectation_and_passes_with_12():
    gpus = nvlink.parse(text(NV, H100_PCIE))
    bare = nvlink.judge(gpus, {})
    assert [v.passed for v in bare] == [False, False]
    assert "link 4, 5, 10, 11, 16, 17 inactive among 12 active" in bare[0].detail
    assert "set nvlinks_per_gpu" in bare[0].detail
    told = nvlink.judge(gpus, {"nvlinks_per_gpu": 12})
    assert [v.passed for v in told] == [True, True]
    assert "unused by the platform: link 4, 5, 10, 11, 16, 17" in told[0].detail
    assert [v.passed for v in nvlink.judge(gpus, {"nvlinks_per_gpu": 18})] == [False, False]


def test_a_link_slower_than_its_peers_on_the_same_gpu_fails_naming_both_speeds():
    raw = text(NV, A100).replace("Link 3: 25 GB/s", "Link 3: 12.5 GB/s")
    (verdict,) = nvlink.judge(nvlink.parse(raw), {"nvlinks_per_gpu": 12})
    assert not verdict.passed
    assert verdict.subject == "GPU7" and "link 3 at 12.5 GB/s while its other links run at 25 GB/s" in verdict.detail


def test_a_gpu_whose_links_are_slower_than_the_other_gpus_fails():
    raw = text(NV, "3x-rtxa6000-nvlink-s-one-gpu-inactive.txt")
    head, sep, tail = raw.partition("GPU 1:")
    raw = head + sep + tail.replace("14.062 GB/s", "7.031 GB/s", 4)
    verdicts = nvlink.judge(nvlink.parse(raw), {"nvlinks_per_gpu": 4})
    assert [v.passed for v in verdicts] == [True, False, False]
    assert ("link 0, 1, 2, 3 at 7.031 GB/s while other NVIDIA RTX A6000 GPUs' links run at 14.062 GB/s"
            in verdicts[1].detail)


def test_an_elided_capture_that_shows_nothing_failing_is_refused_not_counted(tmp_path, capsys):
    # a real capture cut the way documentation cuts long output: the GPU has 12 links, 1 is shown; what is
    # shown decides nothing, so the capture is refused rather than judged on the links shown
    lines = text(NV, A100).splitlines()
    raw = "\n".join(lines[:4] + ["......"]) + "\n"
    with pytest.raises(ProbeParseError, match=r"elided \('\.\.\.'\)"):
        nvlink.judge(nvlink.parse(raw), {})
    f = tmp_path / "elided.txt"
    f.write_text(raw)
    assert main(["probe", "nvlink", "--input", str(f)]) == 4
    err = capsys.readouterr().err
    assert "elided" in err and "1 active" not in err


def test_bridge_pair_box_expects_four_links():
    gpus = nvlink.parse(text(NV, "3x-rtxa6000-nvlink-s-one-gpu-inactive.txt"))
    assert [v.passed for v in nvlink.judge(gpus, {"nvlinks_per_gpu": 4})] == [True, True, False]


def test_a_platform_without_nvlink_says_zero_and_its_unbridged_gpus_pass():
    gpus = nvlink.parse(text(NV, "a100-sxm4-gpu6-all-links-inactive-azure.txt"))
    assert [v.passed for v in nvlink.judge(gpus, {"nvlinks_per_gpu": 0})] == [True]
    assert [v.passed for v in nvlink.judge(gpus, {"nvlinks_per_gpu": 12})] == [False]


@pytest.mark.parametrize("bad", ["", "Link 0: 25 GB/s\n", "GPU 0: X (UUID: u)\n\t Link 0: fast\n",
                                 "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n"])
def test_not_nvlink_status_is_a_parse_error(bad):
    with pytest.raises(ProbeParseError):
        nvlink.parse(bad)


def _silent_nvlink(tmp_path, monkeypatch, listed: str = "0, NVIDIA H100 80GB HBM3") -> None:
    """A stand-in nvidia-smi that answers `nvlink -s` as the lent H100 alone in a VM did (exit 0, nothing:
    fixtures/gpu-validation/h100-sxm-vm-580-nvlink-s-empty.txt) and lists that one GPU."""
    import os

    from evidence import LENT

    empty = LENT / "h100-sxm-vm-580-nvlink-s-empty.txt"
    assert not [line for line in empty.read_text().splitlines() if not line.startswith("# source:")]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text('#!/bin/sh\ncase "$1" in nvlink) exit 0;; --query-gpu=index,name) '
                      f'printf "{listed}"; exit 0;; esac\nexit 9\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_a_node_that_lists_no_link_fails_every_gpu_of_an_nvlink_platform(tmp_path, monkeypatch):
    from clustercheck.probes import get, run_live

    _silent_nvlink(tmp_path, monkeypatch)
    outcome = run_live(get("nvlink"), {"nvlinks_per_gpu": 18})
    assert outcome.outcome == "failed", outcome
    (verdict,) = outcome.verdicts
    assert verdict.subject.startswith("GPU0") and "no link listed under this GPU; platform expects 18" in verdict.detail


@pytest.mark.parametrize("expect", [{}, {"nvlinks_per_gpu": 0}])
def test_a_node_that_lists_no_link_is_a_skip_where_no_nvlink_is_expected(tmp_path, monkeypatch, expect):
    from clustercheck.probes import get, run_live

    _silent_nvlink(tmp_path, monkeypatch)
    outcome = run_live(get("nvlink"), expect)
    assert outcome.outcome == "skipped" and outcome.reason == "nvidia-smi nvlink -s lists no link: no NVLink on this machine"


def test_a_node_that_lists_neither_link_nor_gpu_fails_an_nvlink_platform_and_skips_elsewhere(tmp_path, monkeypatch):
    """nvidia-smi answering with exit 0 and no GPU at all: never a skip where the platform has NVLink."""
    from clustercheck.probes import get, run_live

    _silent_nvlink(tmp_path, monkeypatch, listed="")
    outcome = run_live(get("nvlink"), {"nvlinks_per_gpu": 18})
    assert outcome.outcome == "failed", outcome
    (verdict,) = outcome.verdicts
    assert verdict.subject == "node" and "lists no GPU; platform expects 18 per GPU" in verdict.detail
    outcome = run_live(get("nvlink"), {})
    assert outcome.outcome == "skipped" and "nvidia-smi lists no GPU: no NVLink on this machine" in outcome.reason
