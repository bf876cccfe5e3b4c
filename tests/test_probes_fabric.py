"""fabric: NVSwitch fabric state per GPU from `nvidia-smi -q`, on every capture, edited captures, the CLI and live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clustercheck.cli import main
from clustercheck.exitcodes import Exit
from clustercheck.probes import fabric
from clustercheck.probes import get, run_live
from clustercheck.probes.base import ProbeSkip, ProbeVerdict
from clustercheck.judging.thresholds import load_profile
from evidence import LENT, TOOLS, files, ids, text

Q = "nvidia-smi-q"
NVSIM = "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"
VM = LENT / "h100-sxm-vm-580-nvidia-smi-q.txt"  # one H100 SXM alone in a VM: Fabric State N/A, Status N/A
CAPTURES = [*files(Q), VM]
# every capture, without an expectation: Completed/Success passes, N/A everywhere or no Fabric section skips
OUTCOME = {
    "a10g-535.247-nvidia-smi-q-sram-parity-secded-layout-dcgm232": "skipped",   # State N/A
    "azure-8gpu-nvidia-smi-q-retired-pages-excerpt": "skipped",                 # an excerpt: no Fabric section
    "gh200-480gb-nvidia-smi-a-della-gh": "skipped",                             # State N/A
    "h100-80gb-hbm3-nvidia-smi-a-della": "passed",                              # Completed / Success
    "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim": "passed",                       # 8 x Completed / Success
    "v100-sxm2-power9-nvidia-smi-q-traverse-partial": "skipped",                # driver 418: no Fabric section
    "h100-sxm-vm-580-nvidia-smi-q": "skipped",                                  # State N/A
}
REQUIRED = {"nvswitch_fabric": True}


def outcome(body: str, expect: dict[str, object]) -> tuple[str, list[ProbeVerdict]]:
    try:
        verdicts = fabric.judge(fabric.parse(body), expect)
    except ProbeSkip as exc:
        return f"skipped: {exc.reason}", []
    return ("passed" if all(v.passed for v in verdicts) else "failed"), verdicts


@pytest.mark.parametrize("path", CAPTURES, ids=ids(CAPTURES))
def test_every_capture_passes_or_skips_without_an_expectation(path):
    got, verdicts = outcome(path.read_text(), {})
    assert got.split(":")[0] == OUTCOME[path.stem], got
    if got == "passed":
        assert all(v.detail == "State Completed, Status Success" for v in verdicts)
    else:
        assert "no NVSwitch fabric on this machine" in got
    assert outcome(path.read_text(), {"nvswitch_fabric": False})[0] == got


@pytest.mark.parametrize("path", CAPTURES, ids=ids(CAPTURES))
def test_with_nvswitch_fabric_every_gpu_must_be_completed_and_success(path):
    got, verdicts = outcome(path.read_text(), REQUIRED)
    assert got == ("passed" if OUTCOME[path.stem] == "passed" else "failed")
    if got == "failed":  # every GPU fails, saying what it read (and a capture cut short fails its node)
        gpus = [v for v in verdicts if v.subject != "node"]
        assert gpus and not any(v.passed for v in verdicts)
        assert all("State N/A, Status N/A" in v.detail or "no Fabric section" in v.detail for v in gpus)


def edit(body: str, gpu: int, old: str, new: str) -> str:
    """The capture with `old` replaced by `new` inside the section of GPU `gpu` only."""
    head, *sections = body.split("\nGPU ")
    assert old in sections[gpu]
    sections[gpu] = sections[gpu].replace(old, new, 1)
    return "\nGPU ".join([head, *sections])


def status_line(value: str) -> str:
    return "        Status                            : " + value


def test_one_gpu_in_progress_and_one_failed_fail_exactly_those_gpus():
    # Status means something only once State is Completed (nvmlGpuFabricInfo_t); N/A stands in before
    body = edit(text(Q, NVSIM), 2, f"State                             : Completed\n{status_line('Success')}",
                f"State                             : In Progress\n{status_line('N/A')}")
    body = edit(body, 5, status_line("Success"), status_line("Failure"))
    for expect in ({}, REQUIRED):
        got, verdicts = outcome(body, expect)
        failed = {v.subject: v.detail for v in verdicts if not v.passed}
        assert got == "failed" and len(verdicts) == 8
        assert failed == {
            "GPU2 (0000:3a:00.0)": "State In Progress, Status N/A: fabric registration has not completed "
                                   "(is the fabric manager running?); CUDA needs State Completed, Status Success",
            "GPU5 (0000:ab:00.0)": "State Completed, Status Failure: fabric registration failed; "
                                   "CUDA needs State Completed, Status Success",
        }


def test_not_started_and_a_gpu_without_the_section_fail_by_name():
    body = edit(text(Q, NVSIM), 1, "State                             : Completed",
                "State                             : Not Started")
    body = edit(body, 7, "    Fabric\n", "    Fabrik\n")  # GPU7 prints no Fabric section
    got, verdicts = outcome(body, {})
    failed = {v.subject.split()[0]: v.detail for v in verdicts if not v.passed}
    assert got == "failed" and set(failed) == {"GPU1", "GPU7"}
    assert "Not Started" in failed["GPU1"] and "fabric manager running" in failed["GPU1"]
    assert failed["GPU7"].startswith("no Fabric section in nvidia-smi -q (other GPUs here report")


def test_one_gpu_without_a_fabric_state_among_completed_ones_fails():
    body = edit(text(Q, NVSIM), 4, "State                             : Completed",
                "State                             : N/A")
    got, verdicts = outcome(body, {})
    assert got == "failed" and [v.subject for v in verdicts if not v.passed] == ["GPU4 (0000:9a:00.0)"]


def test_the_lent_vm_fails_with_the_expectation_and_skips_without():
    got, verdicts = outcome(VM.read_text(), REQUIRED)
    (gpu,) = verdicts
    assert got == "failed" and gpu.subject.startswith("GPU0 (") and gpu.measured == "State N/A, Status N/A"
    assert gpu.detail == ("State N/A, Status N/A: this GPU reports no NVSwitch fabric where one is expected "
                          "(nvswitch_fabric: true)")
    skipped = "skipped: no NVSwitch fabric on this machine (Fabric State N/A on every GPU)"
    assert outcome(VM.read_text(), {})[0] == skipped


def test_the_nvswitch_profiles_and_only_they_expect_the_fabric():
    shipped = sorted((Path(__file__).resolve().parent.parent / "thresholds").glob("*.yaml"))
    wanted = {p.stem for p in shipped if load_profile(p).expect.get("nvswitch_fabric")}
    assert wanted == {"h100-sxm-8x", "h200-sxm-8x", "b200-8x"}


@pytest.mark.parametrize("args, code, line", [
    (["--platform", "h100-sxm-8x"], Exit.FAILED, "FAIL GPU0 (0000:"),
    (["--expect", "nvswitch_fabric=true"], Exit.FAILED, "State N/A, Status N/A"),
    ([], Exit.NOTHING, "SKIPPED: no NVSwitch fabric on this machine"),
    (["--platform", "h100-sxm-1x"], Exit.NOTHING, "SKIPPED: no NVSwitch fabric on this machine"),
])
def test_the_lent_vm_through_the_cli(args, code, line, capsys):
    assert main(["probe", "fabric", "--input", str(VM), *args]) == code
    assert line in capsys.readouterr().out


def test_the_healthy_8_gpu_capture_passes_the_h100_profile_through_the_cli(capsys):
    assert main(["probe", "fabric", "--input", str(TOOLS / Q / NVSIM), "--platform", "h100-sxm-8x"]) == Exit.PASSED
    assert capsys.readouterr().out.count("PASS GPU") == 8


def test_gpus_missing_from_the_capture_are_named_against_the_platforms_count(capsys):
    """One GPU of an 8-GPU platform judged with one FAIL and not a word of the 7 others (nvlink counts them)."""
    assert main(["probe", "fabric", "--input", str(VM), "--platform", "h100-sxm-8x"]) == Exit.FAILED
    assert ("FAIL node: GPUs listed: GPU 1, 2, 3, 4, 5, 6, 7 not listed, their fabric state not judged; 1 GPU(s) "
            "listed, the platform has 8") in capsys.readouterr().out
    # the whole 8-GPU capture says its count was judged; a GPU section cut from it is named by number
    got, verdicts = outcome(text(Q, NVSIM), {"gpu_count": 8})
    assert got == "passed" and verdicts[-1] == ProbeVerdict("node", "GPUs listed", True,
                                                            "8 GPU(s) listed, as the platform has", 8, 8)
    head, *sections = text(Q, NVSIM).split("\nGPU ")
    got, verdicts = outcome("\nGPU ".join([head, *sections[:6]]), {"gpu_count": 8})
    (listed,) = [v for v in verdicts if v.what == "GPUs listed"]
    assert got == "failed" and not listed.passed and listed.detail.startswith("GPU 6, 7 not listed")


def test_a_bad_expectation_is_bad_input(capsys):
    assert main(["probe", "fabric", "--input", str(VM), "--expect", "nvswitch_fabric=maybe"]) == Exit.BAD_INPUT
    assert "nvswitch_fabric: expected true/false" in capsys.readouterr().err


# -- live, with a stand-in nvidia-smi -------------------------------------------------------------------

def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdout: str) -> None:
    """An executable `nvidia-smi` first on PATH that prints `stdout` and exits 0, whatever it is asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "out").write_text(stdout)
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n/bin/cat {tmp_path / 'out'}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def body_of(path: Path) -> str:
    return path.read_text().split("\n", 2)[2]  # without the fixture's source line, as nvidia-smi prints it


def test_live_a_gpu_still_training_fails_naming_it(tmp_path, monkeypatch):
    body = edit(body_of(TOOLS / Q / NVSIM), 6, "State                             : Completed",
                "State                             : In Progress")
    stand_in(tmp_path, monkeypatch, body)
    result = run_live(get("fabric"), REQUIRED)
    assert result.outcome == "failed" and [v.subject for v in result.failures] == ["GPU6 (0000:ba:00.0)"]


def test_live_the_lent_vm_skips_without_and_fails_with_the_expectation(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, body_of(VM))
    assert run_live(get("fabric"), {}).outcome == "skipped"
    failed = run_live(get("fabric"), REQUIRED)
    assert failed.outcome == "failed" and failed.failures[0].subject.startswith("GPU0 (")


def test_live_a_healthy_node_passes(tmp_path, monkeypatch):
    stand_in(tmp_path, monkeypatch, body_of(TOOLS / Q / NVSIM))
    result = run_live(get("fabric"), REQUIRED)
    assert result.outcome == "passed" and len(result.verdicts) == 8
