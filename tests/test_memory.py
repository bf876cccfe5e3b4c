"""Buffers that cannot fit are refused before any rank starts: each kind's need, counted as its
rank-side code allocates (checked against the real Bench buffers for every collective), and the
one-line refusal naming the check, its file:line, the size, the need and what is available."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import UserError
from clustercheck.formulas import PLACEMENTS, layout
from helpers import host_need, memory_need
from clustercheck.formulas import CHECK_ELEMENTS
from clustercheck.judging.platform import host_available
from clustercheck.run.fit import check_fits
from clustercheck.suite.load import load_suite

ROOT = Path(__file__).resolve().parent.parent
GiB = 1 << 30


def quick_gate() -> Any:
    return load_suite(ROOT / "suites" / "quick-gate-nvlink8.yaml", "suites/quick-gate-nvlink8.yaml")


def where(check_id: str) -> str:
    """file:line of a quick-gate check as the suite loader records it (the suite grows over time)."""
    return next(c.where for c in quick_gate().checks if c.id == check_id)


def test_quick_gate_with_8_ranks_on_this_cpu_box_is_refused_in_one_line() -> None:
    """The issue's case: `clustercheck run quick-gate-nvlink8 --platform h100-sxm-8x` with 8 ranks on
    this GPU-less box (gloo) ran 7.5 minutes into the OOM killer; now it stops before starting."""
    available = host_available()
    assert available is not None and available < 64 * GiB, "this test expects the small shared box"
    with pytest.raises(UserError) as err:
        check_fits(quick_gate().checks, 8, "gloo", None, available)
    text = str(err.value)
    assert text.startswith(f"{where('allreduce-default')}: check allreduce-default: all_reduce of 8GiB needs "
                           "64.1 GiB of host memory (8.0 GiB per rank x 8 ranks per node, gloo), but this node has ")
    assert f"{available / GiB:.1f} GiB available" in text and "\n" not in text


def test_quick_gate_fits_an_a100_40gb_and_not_a_16gb_gpu() -> None:
    checks = quick_gate().checks
    check_fits(checks, 8, "nccl", 40 * GiB, 512 * GiB)  # all_reduce 8 GiB in place: one buffer per rank
    with pytest.raises(UserError) as err:
        check_fits(checks, 8, "nccl", 6 * GiB, 512 * GiB)
    assert str(err.value) == (f"{where('allreduce-default')}: check allreduce-default: all_reduce of 8GiB needs "
                              "8.0 GiB of memory on each GPU, but a GPU of this node has 6.0 GiB free; use smaller sizes")


def test_gpu_only_kinds_are_not_judged_on_a_gloo_run_which_skips_them() -> None:
    p2p = [c for c in quick_gate().checks if c.measure == "p2p"]
    check_fits(p2p, 8, "gloo", None, 1 * GiB)  # 2 GiB per GPU, but a gloo run never runs it
    with pytest.raises(UserError, match="p2p-matrix: p2p of 256MiB needs 2.0 GiB of memory on each GPU"):
        check_fits(p2p, 8, "nccl", 1 * GiB, None)


@pytest.mark.parametrize("collective", sorted(PLACEMENTS))
def test_collective_need_is_what_the_rank_code_allocates(collective: str) -> None:
    """Bench (measure/collectives.py) builds the buffers; their storage plus the check's bounded
    temporaries (mask and its int64 copy, measured on an H100 by tests/gpu) is the need, for every
    placement and the peak over the sizes."""
    import torch

    from clustercheck.measure import RankContext
    from clustercheck.measure.collectives import DTYPES, Bench

    n, sizes = 4, [4096, 1 << 20, 3 << 20]
    for dtype in ("float32", "bfloat16"):
        ctx = RankContext(rank=1, world_size=n, local_rank=1, backend="gloo", device=torch.device("cpu"), host="h")
        peak = 0
        for size in sizes:
            elt = torch.tensor([], dtype=DTYPES[dtype]).element_size()
            lay = layout(collective, size, elt, n)
            for placement in PLACEMENTS[collective]:
                bench = Bench(ctx, collective, lay, DTYPES[dtype], inplace=placement == "in")
                storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                            for t in (bench.send, bench.recv)}  # in place: one storage behind both
                mask = min(max(lay.send_count, lay.recv_count), CHECK_ELEMENTS) * 9
                peak = max(peak, sum(storages.values()) + mask)
        params = {"sizes": sizes, "dtype": dtype, "placements": list(PLACEMENTS[collective])}
        assert memory_need(collective, params, n, "gloo") == peak, (collective, dtype)
        assert host_need(collective, params, n, "gloo") == peak * n
        assert memory_need(collective, params, n, "nccl") == peak and host_need(collective, params, n, "nccl") == 0


def test_copy_gemm_and_p2p_needs() -> None:
    size = 256 << 20
    assert memory_need("p2p", {"size": size}, 8) == 8 * size  # its own source and one buffer from each peer
    assert memory_need("device_memory", {"size": size}, 8) == 2 * size
    assert memory_need("host_device", {"size": size}, 8) == size  # on the GPU, and pinned on the host:
    assert host_need("host_device", {"size": size}, 8) == 8 * size
    assert host_need("host_memory", {"size": size}, 4, "nccl") == 2 * size * 4  # host buffers, even on GPU runs
    assert memory_need("gemm", {"m": 8192, "dtype": "auto"}, 8, "nccl") == 3 * 8192 ** 2 * 2  # bf16 on GPUs
    assert memory_need("gemm", {"m": 8192, "dtype": "auto"}, 8, "gloo") == 3 * 8192 ** 2 * 4  # fp32 on CPUs
    assert memory_need("probe", {"probe": "ecc"}, 8) == 0 and memory_need("a-plugin-kind", {}, 8) == 0


def test_host_available_reads_memavailable(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n")
    assert host_available(meminfo) == 20000000 * 1024
    assert host_available(tmp_path / "absent") is not None  # falls back to physical memory


def test_the_worker_empties_cudas_cache_between_tasks_once_cuda_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the CUDA boundary (tests/gpu/test_gpu_binding.py measures the real cache): release_free_memory
    empties torch's caching allocator only where CUDA was initialised, never initialising it itself."""
    import types

    from clustercheck.run import worker

    calls: list[str] = []
    up = {"value": False}
    cuda = types.SimpleNamespace(is_initialized=lambda: up["value"], empty_cache=lambda: calls.append("empty"))
    monkeypatch.setitem(__import__("sys").modules, "torch", types.SimpleNamespace(cuda=cuda))
    worker.release_free_memory()
    assert calls == []  # a CPU rank: no CUDA context is created just to free nothing
    up["value"] = True
    worker.release_free_memory()
    assert calls == ["empty"]


@pytest.mark.pool
def test_the_cli_refuses_a_suite_that_cannot_fit_before_any_rank_starts(tmp_path: Path) -> None:
    """The issue's case end to end: quick-gate-nvlink8 with 8 gloo ranks on a box with less than 64 GiB
    ran 7.5 minutes into the OOM killer; now it is one line, exit 4, before a rank or a run dir exists."""
    import subprocess
    import sys

    from clustercheck.judging.platform import host_available

    available = host_available()
    if available is None or available >= 64 << 30:
        pytest.skip("this machine has room for 8 x 8 GiB; the refusal needs less")
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "run", "quick-gate-nvlink8", "--platform",
                           "h100-sxm-8x", "--ranks", "8", "--out", str(tmp_path / "out")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "check allreduce-default: all_reduce of 8GiB needs 64.1 GiB of host memory" in proc.stdout + proc.stderr
    assert not (tmp_path / "out").exists()
