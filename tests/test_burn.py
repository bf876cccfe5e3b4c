"""The burn measure (issue 17): GEMM on every rank at once while a watch samples the hardware, each result
checked bit for bit against a known answer, each GPU (rank) judged against the best of its node. On CPU it
runs for real through the pool with gloo; the GPU watch runs through the real pynvml over the stand-in
NVML library (tests/nvml_standin/)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from clustercheck import yamlfile
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, Rules
from clustercheck.counters import watch as w
from clustercheck.errors import HarnessError, UserError
from clustercheck.measure import RankContext
from clustercheck.measure import burn as rank_burn
from helpers import cpu_profile, memory_need
from clustercheck.schema import Fields
from clustercheck.kinds.base import CheckSpec
from nvml_capture import h100_node, in_process

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")
FAST = "{duration: 1, m: 128, chunk: 4, interval: 0.1}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_known_answer_is_what_a_correct_gemm_returns_bit_for_bit(dtype: torch.dtype) -> None:
    a, b = rank_burn.operands(512, dtype, torch.device("cpu"), seed=7)
    ref = rank_burn.known_answer(a, b)
    assert torch.equal(torch.matmul(a, b), ref)
    assert float(ref.abs().max()) > 8  # not a trivial product
    wrong = torch.matmul(a, b)
    wrong.view(-1)[1000] = torch.nextafter(wrong.view(-1)[1000], torch.tensor(1e9, dtype=dtype))  # one ulp off
    assert int((wrong != ref).sum()) == 1


def cpu_ctx() -> RankContext:
    return RankContext(0, 1, 0, "gloo", torch.device("cpu"), socket.gethostname())


def params(**over: Any) -> dict[str, Any]:
    return {"duration": 0.3, "m": 128, "dtype": "auto", "chunk": 4, "warmup": 1, "interval": 0.05, "seed": 0, **over}


def test_a_burn_on_a_cpu_rank_counts_gemms_checks_and_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_burn, "_barrier", lambda ctx: None)  # one rank, no process group
    r = rank_burn.burn(cpu_ctx(), params())
    assert r["dtype"] == "float32" and r["wrong"] == 0 and r["gemms"] == 4 * r["checked"] and r["seconds"] >= 0.3
    assert r["tflops_min"] <= r["tflops"] <= r["tflops_max"] and r["subject"] == "rank0"
    assert r["watch"]["samples"] >= 3 and r["watch"]["clock_mhz_min"] > 0 and not r["watch_error"]
    off = rank_burn.burn(cpu_ctx(), params(interval=0))
    assert off["watch"] is None


def test_an_injected_corruption_is_counted_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_burn, "_barrier", lambda ctx: None)
    r = rank_burn.burn(cpu_ctx(), params(fault={"kind": "corrupt", "rank": 0}))
    assert r["wrong"] == 1


def answer(host: str, subject: str, tflops: float, **over: Any) -> dict[str, Any]:
    """A rank's answer as measure.burn returns it, built by hand for the judge."""
    watch = {"samples": 10, "errors": [], "error_count": 0, "temp_max": 71.0, "throttled_s": 0.0, "clock_drop": 0.02}
    return {"subject": subject, "bus_id": "", "host": host, "dtype": "bfloat16", "m": 8192, "gemms": 100,
            "checked": 10, "wrong": 0, "seconds": 60.0, "tflops": tflops, "tflops_min": tflops * 0.98,
            "tflops_max": tflops * 1.01, "watch": watch, "watch_error": "", "interval": 1.0, **over}


def judge(answers: list[dict[str, Any]], limits: dict[str, Any] | None = None) -> Any:
    check = CheckSpec(id="burn", measure="burn", scope="node", params={}, timeout=60, env=(), file="s.yaml", line=1,
                      description="")
    return KINDS["burn"].judge(Answers(check, answers, [{"host": r["host"]} for r in answers], "nccl"),
                               Rules(limits or {}))


def test_each_gpu_is_judged_against_the_best_of_its_own_node() -> None:
    m, verdicts = judge([answer("n1", "GPU0", 700.0), answer("n1", "GPU1", 620.0), answer("n1", "GPU2", 640.0)])
    rel = [(v.subject, round(float(v.measured), 3), v.passed) for v in verdicts if v.metric == "relative"]
    assert rel == [("GPU0", 1.0, True), ("GPU1", 0.886, False), ("GPU2", 0.914, True)]
    assert next(v for v in verdicts if not v.passed).rule.source.startswith("huggingface/gpu-fryer")
    assert m.metrics["relative"] == pytest.approx(620 / 700) and m.metrics["tflops"] == 620 and m.worst == "GPU1"
    _, slow_node = judge([answer("n2", "GPU0", 500.0), answer("n2", "GPU1", 480.0)])  # its own best, not n1's
    assert all(v.passed for v in slow_node)


def test_a_wrong_element_fails_whatever_the_limits_and_an_unwatched_burn_is_an_error() -> None:
    _, verdicts = judge([answer("n1", "GPU0", 700.0, wrong=3), answer("n1", "GPU1", 700.0)])
    assert [(v.subject, v.passed) for v in verdicts if v.metric == "wrong"] == [("GPU0", False), ("GPU1", True)]
    with pytest.raises(HarnessError, match="watch failed on 1 rank.*n1 GPU1: NVMLError_GPUIsLost"):
        judge([answer("n1", "GPU0", 700.0),
               answer("n1", "GPU1", 700.0, watch={**answer("n", "g", 1)["watch"], "error_count": 1,
                                                  "errors": ["NVMLError_GPUIsLost: GPU is lost"]})])


def test_a_limit_on_what_the_watch_could_not_see_is_an_error_not_a_pass() -> None:
    from clustercheck.errors import NotMeasured
    from clustercheck.judging.limits import Limit

    hot = Limit("burn", "temp_max", "<=", 84.0, "C", "<= 84", "facebookresearch/gcm ... 84 C", "p.yaml:3")
    _, verdicts = judge([answer("n1", "GPU0", 700.0, watch={**answer("n", "g", 1)["watch"], "temp_max": 88.0})],
                        {"temp_max": hot})
    assert [(v.measured, v.passed) for v in verdicts if v.metric == "temp_max"] == [(88.0, False)]
    unseen = {**answer("n", "g", 1)["watch"], "temp_max": None}
    with pytest.raises(NotMeasured, match="temp_max"):
        judge([answer("n1", "GPU0", 700.0, watch=unseen)], {"temp_max": hot})


def test_a_gpu_the_watch_never_read_is_named_not_left_out_of_a_limit_the_others_meet() -> None:
    from clustercheck.errors import NotMeasured
    from clustercheck.judging.limits import Limit

    hot = Limit("burn", "temp_max", "<=", 84.0, "C", "<= 84", "facebookresearch/gcm ... 84 C", "p.yaml:3")
    blind = {**answer("n", "g", 1)["watch"], "samples": 0, "temp_max": None, "throttled_s": None, "clock_drop": None}
    with pytest.raises(NotMeasured, match="1 GPU.*n1 GPU1: no temp_max"):  # it judged GPU0 alone, and passed, before
        judge([answer("n1", "GPU0", 700.0), answer("n1", "GPU1", 700.0, watch=blind)], {"temp_max": hot})


def test_the_gpu_watch_reads_nvml_by_bus_id_and_times_each_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    node = h100_node()
    node["gpus"][5]["watch"] = {"temp": 83, "sm_mhz": 1755, "mem_mhz": 2619, "max_sm_mhz": 1980,
                                "power_mw": 699000, "reasons": 0x4}
    nv = in_process(monkeypatch, node)
    read = w.gpu_reader(node["gpus"][5]["bus_id"][4:].lower())  # sysfs form, as ranks know their GPU
    first = read()
    assert (first.temp_c, first.sm_mhz, first.mem_mhz, first.power_w, first.reasons) == (83, 1755, 2619, 699.0, 4)
    nv.nvmlLib.gpus[5]["watch"].update(reasons=0x4 | 0x40, sm_mhz=1410)  # HW thermal slowdown sets in
    time.sleep(0.02)
    second = read()
    time.sleep(0.02)
    seen = w.summary([first, second, read()], [])
    thermal = seen["reasons"]["HW Thermal Slowdown"]
    assert seen["reasons"]["SW Power Cap"] == pytest.approx(thermal + (second.t - first.t))
    assert seen["throttled_s"] == pytest.approx(seen["reasons"]["HW Thermal Slowdown"])  # power cap is not throttling
    assert seen["clock_drop"] == pytest.approx(1 - 1410 / 1755) and seen["temp_max"] == 83


def test_burn_params_are_checked_with_file_line_and_key(tmp_path: Path) -> None:
    parse = KINDS["burn"].parse
    ok = parse(Fields(yamlfile.loads("duration: 30\ndtype: bf16\n", "s.yaml"), "s.yaml", "params"))
    assert ok["duration"] == 30.0 and ok["dtype"] == "bfloat16" and ok["interval"] == 1.0 and ok["m"] == 0
    for text, key in (("m: 32768\n", "m"), ("interval: 0.001\n", "interval"), ("dtype: float8_e5m2\n", "dtype"),
                      ("duraton: 5\n", "duraton")):
        with pytest.raises(UserError) as err:
            parse(Fields(yamlfile.loads(text, "s.yaml"), "s.yaml", "params"))
        assert str(err.value).startswith(f"s.yaml:1: params.{key}: ")


def test_memory_need_counts_the_known_answers_float64_work() -> None:
    assert memory_need("burn", {"m": 8192, "dtype": "bfloat16"}, 8, "nccl") == 8192 ** 2 * (4 * 2 + 24)
    assert memory_need("burn", {"m": 0, "dtype": "auto"}, 2, "gloo") == 1024 ** 2 * (4 * 4 + 24)


PROFILE = cpu_profile("""\
  burn-ok:
    tflops: {limit: ">= 0.000001", unit: TFLOP/s, source: "clustercheck's test: any working GEMM"}
    relative: {limit: ">= 0.01", unit: ratio, source: "clustercheck's test: 2 ranks on a shared 2-core VM"}
  burn-corrupt:
    relative: {limit: ">= 0.01", unit: ratio, source: "clustercheck's test"}
  burn-hot:
    relative: {limit: ">= 0.01", unit: ratio, source: "clustercheck's test"}
    temp_max: {limit: "<= 84", unit: C, source: "facebookresearch/gcm gcm/health_checks/checks/check_nvidia_smi.py"}
""")


def test_burn_runs_on_cpu_ranks_through_the_pool_and_reaches_the_record(pytester: pytest.Pytester) -> None:
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "s.yaml").write_text("checks:\n" + "".join(
        f"  - id: {c}\n    measure: burn\n    params: {FAST}\n" for c in ("burn-ok", "burn-corrupt", "burn-hot")))
    res = pytester.runpytest("suites/s.yaml", *RUN, "--cc-inject-fault", "burn-corrupt:corrupt@1")
    data = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    got = {r["check"]: r for r in data["results"]}
    assert got["burn-ok"]["outcome"] == "passed", res.stdout.str()
    assert got["burn-ok"]["metrics"]["wrong"]["value"] == 0 and got["burn-ok"]["metrics"]["tflops"]["value"] > 0
    assert {row["subject"] for row in got["burn-ok"]["rows"]} == {"rank0", "rank1"}
    assert all(row["watch"]["samples"] >= 5 for row in got["burn-ok"]["rows"])
    bad = [(v["subject"], v["measured"]) for v in got["burn-corrupt"]["verdicts"] if not v["passed"]]
    assert got["burn-corrupt"]["outcome"] == "failed" and bad == [("rank1", 1.0)]
    if list(Path("/sys/class/thermal").glob("thermal_zone*")):
        assert got["burn-hot"]["outcome"] in ("passed", "failed")
    else:  # no thermal zone on this machine: the temperature limit has nothing to judge, never a pass
        assert got["burn-hot"]["outcome"] == "error" and "temp_max" in json.dumps(got["burn-hot"])


@pytest.mark.pool
def test_the_watch_cost_benchmark_runs_and_prints_both_figures() -> None:
    import re
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "watch_cost.py"
    proc = subprocess.run([sys.executable, str(bench), "--duration", "0.3", "--repeats", "1", "--intervals", "0.1,0.02",
                           "--m", "128"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # one pair is too few to judge 1% on a busy VM
    row_re = r"^\s+(0\.1|0\.02)s" + r"\s+([\d.]+)" * 3 + r"\s+(-?[\d.]+)%\s+([\d.]+)\s+([\d.]+)%\s+(-?[\d.]+)\s+[\d.]+\.\.[\d.]+$"
    rows = re.findall(row_re, proc.stdout, re.M)
    assert [r[0] for r in rows] == ["0.1", "0.02"], proc.stdout
    for _, *row in rows:
        off, on, ratio, cost, samples, share, ms = (float(x) for x in row)
        assert off > 0 and on > 0 and ratio > 0 and abs((1 - ratio) * 100 - cost) < 0.01
        assert samples >= 3 and 0 < share < 100 and abs(ms - (1 - ratio) * 0.3 / samples * 1e3) < 0.01
    assert re.search(r"^cost at 0\.1 s, measured directly: -?[\d.]+%$", proc.stdout, re.M)
    assert re.search(r"^cost at 0\.1 s, from the faster run's -?[\d.]+ ms of load per sample: -?[\d.]+%$",
                     proc.stdout, re.M)
    assert re.search(r"^watch cost below 1% at 0\.1 s: (yes|NO)$", proc.stdout, re.M)
