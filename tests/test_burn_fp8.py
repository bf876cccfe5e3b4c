"""The fp8 burn (dtype float8_e4m3fn): GEMM through torch._scaled_mm, every result checked bit for bit
against a known answer. torch's CPU build has a float8_e4m3fn _scaled_mm, so the burn runs for real here
(directly, and through the pool with gloo); where a device cannot run it, the rank raises naming the
device (an error of the check), which is tested with the device faked. tests/gpu/test_gpu_burn_fp8.py runs
it on a GPU of compute capability 8.9 or later."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from clustercheck import yamlfile
from clustercheck.kinds.burn import MAX_M
from clustercheck.kinds import KINDS
from clustercheck.errors import NoThreshold, UserError
from clustercheck.measure import RankContext
from clustercheck.measure import burn as rank_burn
from helpers import cpu_profile, memory_need
from clustercheck.schema import Fields
from clustercheck.kinds.base import CheckSpec

FP8 = torch.float8_e4m3fn
CPU = torch.device("cpu")
RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")


def test_every_operand_value_is_exact_in_e4m3_and_17_is_the_first_that_is_not() -> None:
    ints = torch.arange(-16, 17, dtype=torch.float32)
    assert torch.equal(ints.to(FP8).float(), ints)  # all 33 values of the operand set round-trip
    assert float(torch.tensor(17.0).to(FP8).float()) != 17.0  # 10001b: 5 significant bits, rounds
    a, b = rank_burn.operands(256, FP8, CPU, seed=3)
    assert a.dtype == b.dtype == FP8 and a.is_contiguous() and b.t().is_contiguous()  # b column-major
    for x in (a, b):
        v = x.float()
        assert torch.equal(v, v.round()) and float(v.abs().max()) == 16.0 and len(v.unique()) == 33


def test_the_fp8_known_answer_is_the_exact_product_of_the_dequantised_operands() -> None:
    a, b = rank_burn.operands(512, FP8, CPU, seed=7)
    ref = rank_burn.known_answer(a, b)
    exact = a.float().to(torch.int64) @ b.float().to(torch.int64)  # integer arithmetic: no rounding at all
    assert ref.dtype == torch.float32 and torch.equal(ref.to(torch.int64), exact)
    assert torch.equal(ref.double(), a.double() @ b.double())  # float32 holds it: the rounding changes nothing
    assert float(ref.abs().max()) > 256  # not a trivial product
    assert 256 * MAX_M <= 2 ** 22 < 2 ** 24  # the largest partial sum the largest burn can reach is exact in fp32


def test_an_fp8_gemm_on_this_cpu_returns_the_known_answer_bit_for_bit() -> None:
    rank_burn.fp8_support(CPU)  # torch 2.13's CPU build has a float8_e4m3fn _scaled_mm: nothing to refuse
    a, b = rank_burn.operands(512, FP8, CPU, seed=11)
    ref = rank_burn.known_answer(a, b)
    c = torch.empty_like(ref)
    rank_burn.gemm(a, b)(c)
    assert torch.equal(c, ref)
    top = torch.full((1024, 1024), 16.0).to(FP8)  # every partial sum at its largest: 256 * 1024 = 2^18
    out = torch.empty((1024, 1024))
    rank_burn.gemm(top, top.t().contiguous().t())(out)
    assert bool((out == 2 ** 18).all())


def cpu_ctx() -> RankContext:
    return RankContext(0, 1, 0, "gloo", CPU, socket.gethostname())


def params(**over: Any) -> dict[str, Any]:
    return {"duration": 0.3, "m": 128, "dtype": "float8_e4m3fn", "chunk": 4, "warmup": 1, "interval": 0.05,
            "seed": 0, **over}


def test_an_fp8_burn_on_a_cpu_rank_checks_every_chunk_and_counts_a_corruption(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_burn, "_barrier", lambda ctx: None)  # one rank, no process group
    r = rank_burn.burn(cpu_ctx(), params())
    assert r["dtype"] == "float8_e4m3fn" and r["m"] == 128 and r["wrong"] == 0
    assert r["gemms"] == 4 * r["checked"] and r["checked"] >= 1 and r["tflops"] > 0 and r["seconds"] >= 0.3
    bad = rank_burn.burn(cpu_ctx(), params(interval=0, fault={"kind": "corrupt", "rank": 0}))
    assert bad["dtype"] == "float8_e4m3fn" and bad["wrong"] == 1


def fake_cuda(monkeypatch: pytest.MonkeyPatch, name: str, cc: tuple[int, int] = (9, 0), hip: str | None = None,
              arch: str = "") -> RankContext:
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(gcnArchName=arch))
    monkeypatch.setattr(rank_burn, "_barrier", lambda ctx: pytest.fail("the burn reached its barrier"))
    return RankContext(0, 1, 0, "nccl", torch.device("cuda", 0), "h1")


def test_an_fp8_burn_on_a_gpu_before_compute_capability_8_9_is_an_error_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = fake_cuda(monkeypatch, "NVIDIA A100-SXM4-80GB", (8, 0))
    with pytest.raises(RuntimeError, match=r"^fp8 GEMM needs a CUDA GPU of compute capability 8\.9 or later "
                                           r"\(this: NVIDIA A100-SXM4-80GB, 8\.0\)$"):
        rank_burn.burn(ctx, params(dtype="float8_e4m3fn"))


def test_an_fp8_burn_on_an_mi300x_is_an_error_naming_its_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = fake_cuda(monkeypatch, "AMD Instinct MI300X", hip="6.3", arch="gfx942:sramecc+:xnack-")
    with pytest.raises(RuntimeError, match=r"needs gfx950 or gfx12 \(this: AMD Instinct MI300X, gfx942"):
        rank_burn.burn(ctx, params())


def test_a_torch_without_an_fp8_gemm_on_this_device_is_an_error_not_another_dtype(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("Could not run 'aten::_scaled_mm.out' with arguments from the 'CPU' backend")

    monkeypatch.setattr(torch, "_scaled_mm", missing)
    monkeypatch.setattr(rank_burn, "_barrier", lambda ctx: pytest.fail("the burn reached its barrier"))
    with pytest.raises(RuntimeError, match=r"fp8 GEMM \(torch._scaled_mm, float8_e4m3fn\) does not run on cpu with "
                                           r"torch .*NotImplementedError: Could not run 'aten::_scaled_mm.out'"):
        rank_burn.burn(cpu_ctx(), params())


def parse(text: str) -> dict[str, Any]:
    return KINDS["burn"].parse(Fields(yamlfile.loads(text, "s.yaml"), "s.yaml", "params"))


def test_fp8_params_take_the_short_alias_and_refuse_an_m_torch_scaled_mm_cannot_take() -> None:
    assert parse("dtype: fp8\n")["dtype"] == parse("dtype: float8_e4m3fn\n")["dtype"] == "float8_e4m3fn"
    assert parse("dtype: fp8\nm: 4096\n")["m"] == 4096
    with pytest.raises(UserError) as err:
        parse("dtype: fp8\nm: 1000\n")
    assert str(err.value) == ("s.yaml:2: params.m: must be a multiple of 16 for float8_e4m3fn (torch._scaled_mm), "
                              "got 1000")
    assert parse("dtype: bf16\nm: 1000\n")["m"] == 1000  # the other dtypes keep any m


def test_memory_need_counts_one_byte_operands_and_a_float32_answer() -> None:
    assert memory_need("burn", {"m": 8192, "dtype": "float8_e4m3fn"}, 8, "nccl") == 8192 ** 2 * (1 + 1 + 4 + 4 + 24)


def check(check_id: str, dtype: str = "fp8") -> CheckSpec:
    return CheckSpec(id=check_id, measure="burn", scope="node", params=parse(f"dtype: {dtype}\n"), timeout=60, env=(),
                     file="s.yaml", line=1, description="")


@pytest.mark.parametrize("platform", ["h100-sxm-8x", "h200-sxm-8x"])
def test_the_fp8_burn_in_check_is_judged_on_the_dense_fp8_peak_and_no_bf16_floor_judges_fp8(platform: str) -> None:
    from clustercheck.run.judge import rules_for
    from clustercheck.judging.profiles import search_path

    profile = search_path().load(platform)
    tflops = rules_for(check("burn-fp8-20min"), profile).limits["tflops"]
    assert (tflops.op, tflops.value, tflops.unit) == (">=", pytest.approx(0.5 * 1979), "TFLOP/s")
    assert "1402.6 of 1979" in tflops.source and "stas00/ml-engineering" in tflops.source
    assert rules_for(check("my-bf16-burn", "bf16"), profile).limits["tflops"].value == pytest.approx(0.6 * 989)
    with pytest.raises(NoThreshold, match=r"defaults\.burn .* applies to dtype auto, bfloat16, float16, not "
                                          r"float8_e4m3fn"):
        rules_for(check("my-fp8-burn"), profile)  # a bf16 floor would judge fp8 wrongly: an error, not a pass


PROFILE = cpu_profile("""\
  fp8-ok:
    relative: {limit: ">= 0.01", unit: ratio, source: "clustercheck's test: 2 ranks on a shared 2-core VM"}
  fp8-corrupt:
    relative: {limit: ">= 0.01", unit: ratio, source: "clustercheck's test"}
""")


def test_an_fp8_burn_runs_on_cpu_ranks_through_the_pool_and_a_corruption_fails_it(pytester: pytest.Pytester) -> None:
    (pytester.path / "thresholds").mkdir()
    (pytester.path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "s.yaml").write_text("checks:\n" + "".join(
        f"  - id: {c}\n    measure: burn\n    params: {{duration: 1, m: 128, chunk: 4, interval: 0, dtype: fp8}}\n"
        for c in ("fp8-ok", "fp8-corrupt")))
    res = pytester.runpytest("suites/s.yaml", *RUN, "--cc-inject-fault", "fp8-corrupt:corrupt@1")
    data = json.loads((pytester.path / "out" / "latest" / "results.json").read_text())
    got = {r["check"]: r for r in data["results"]}
    assert got["fp8-ok"]["outcome"] == "passed", res.stdout.str()
    assert got["fp8-ok"]["metrics"]["wrong"]["value"] == 0
    assert {(row["subject"], row["dtype"]) for row in got["fp8-ok"]["rows"]} == {("rank0", "float8_e4m3fn"),
                                                                                  ("rank1", "float8_e4m3fn")}
    bad = [(v["subject"], v["metric"], v["measured"]) for v in got["fp8-corrupt"]["verdicts"] if not v["passed"]]
    assert got["fp8-corrupt"]["outcome"] == "failed" and bad == [("rank1", "wrong", 1.0)]


def test_the_burn_in_suite_has_an_fp8_burn_beside_the_bf16_one() -> None:
    from clustercheck.suite.load import load_suite

    suite = load_suite(Path(__file__).resolve().parent.parent / "suites" / "burn-in.yaml")
    burns = {c.id: c.params["dtype"] for c in suite.checks if c.measure == "burn"}
    assert burns == {"burn-20min": "bfloat16", "burn-fp8-20min": "float8_e4m3fn"}
