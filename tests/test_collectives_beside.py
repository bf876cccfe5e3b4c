"""What a collective reports beside its headline numbers: the spread of its iterations (iter_cv, iter_us) and
each row's `wrong`. Each must come from what was measured: one iteration has no spread, a row never checked
has no `#wrong 0` (the fail-closed rule, README.md)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from clustercheck.kinds.collectives import iteration_problem, iteration_stats
from helpers import write_suite


def _results(p: pytest.Pytester) -> list[dict]:
    return json.loads((p.path / "out" / "latest" / "results.json").read_text())["results"]


def _profile(p: pytest.Pytester, limits: str) -> None:
    (p.path / "thresholds" / "cpu.yaml").write_text(
        f"platform: cpu\ndetect: {{gpu_count: 0}}\nchecks:\n  ar: {{{limits}}}\n")


# -- iters: 1 ------------------------------------------------------------------------------------------------

def test_one_timed_iteration_has_no_spread() -> None:
    """pstdev of one time is 0: iter_cv 0.0 passed any ceiling (`iter_cv <= 0.0001`)."""
    assert iteration_problem([[3e-6], [5e-6]], ["n1", "n2"]) == "1 timed iteration per rank: no spread"
    stats = iteration_stats([[3e-6], [5e-6]])
    assert math.isnan(stats["iter_cv"]) and "iter_us_min" not in stats
    assert iteration_problem([[3e-6, 4e-6], [5e-6, 5e-6]]) is None  # two are a spread


def test_iters_1_with_an_iter_cv_limit_is_not_judged_on_real_gloo_ranks(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [1MiB], iters: 1, "
                         "warmup: 1}\n")
    _profile(project, "iter_cv: {limit: '<= 0.0001', unit: ratio}")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "2")
    res.assert_outcomes(errors=1)  # was: 1 passed
    (r,) = _results(project)
    assert r["outcome"] == "error", r
    assert "iter_cv at 1MiB (in-place) is not judged: 1 timed iteration per rank: no spread" in r["message"], r
    assert not any(v["metric"] == "iter_cv" and v["passed"] for v in r.get("verdicts") or ()), r["verdicts"]


# -- check_iters: 0 ------------------------------------------------------------------------------------------

def test_rows_never_checked_say_no_wrong_count_on_real_gloo_ranks(project: pytest.Pytester) -> None:
    """check_iters: 0 compared nothing, yet every row said `wrong: 0` (results.json, the report's #wrong column):
    checked and clean. Now None, as nccl-tests prints N/A; the headline `wrong` stays dropped."""
    write_suite(project, "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [1KiB, 1MiB], iters: 3, "
                         "warmup: 1, check_iters: 0}\n")
    _profile(project, "busbw: {limit: '>= 0.000001', unit: GB/s}")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "--ranks", "2")
    res.assert_outcomes(passed=1)
    (r,) = _results(project)
    assert len(r["rows"]) == 2 and all(row["wrong"] is None and row["wrong_ranks"] == [] for row in r["rows"]), r["rows"]
    assert "wrong" not in r["metrics"] and any("correctness not checked (check_iters: 0)" in n for n in r["notes"])
    run = project.path / "out" / "latest"
    for name in ("sla.json", "ctrf.json", "junit.xml", "report.html"):  # every writer took the None
        assert (run / name).stat().st_size > 0, name


def test_a_rank_that_did_not_count_when_asked_to_fails_wrong_naming_it() -> None:
    """None where check_iters asked for a count (a rank that skipped the check) is no count: NaN, named."""
    from clustercheck.kinds.collectives import reduce_collective

    def rank(wrong: object) -> dict:
        return {"dtype": "float32", "rows": [{"size": 1 << 20, "count": 1 << 18, "bytes": 1 << 20, "placement": "in",
                                             "seconds": 1e-3, "wrong": wrong, "iter_seconds": [1e-3] * 3}]}

    m = reduce_collective("all_reduce", [rank(0), rank(None)], ["n1", "n2"], 1 << 20)
    assert math.isnan(m.rows[0]["wrong"]) and m.rows[0]["wrong_ranks"] == [1] and math.isnan(m.metrics["wrong"])
    assert "rank 1 (n2): wrong None" in m.worst_of["wrong"]
    m = reduce_collective("all_reduce", [rank(0), rank(0)], ["n1", "n2"], 1 << 20, checked=False)
    assert m.rows[0]["wrong"] is None and m.rows[0]["wrong_ranks"] == [] and "wrong" not in m.metrics


# -- cuda_graph: the per-iteration pass ----------------------------------------------------------------------
# No GPU here: only the CUDA boundary is faked (the Bench's device buffers, the graph capture and replay in
# _timed, the CUDA events of _event_times), as /tmp/audit-measure/t3_graph_iters.py did; the rank's loop, the
# suite's parser and the judge are the real ones.

GRAPH = "checks:\n  - id: ar\n    measure: all_reduce\n    params: {sizes: [1MiB], warmup: 1, cuda_graph: 5%s}\n"


def _graph_params(tmp_path: Path, extra: str = "") -> dict:
    from clustercheck.suite.load import load_suite

    path = tmp_path / "suite.yaml"
    path.write_text(GRAPH % extra, encoding="utf-8")
    return dict(load_suite(path).checks[0].params)


def _graph_rank(monkeypatch: pytest.MonkeyPatch, p: dict) -> tuple[dict, list[str]]:
    """One GPU rank's answer to `p`: the graph replays at 10 us per op, an eager event pass would say 30 us."""
    import torch

    import clustercheck.measure.collectives as C
    from clustercheck.measure import RankContext

    calls: list[str] = []

    class Bench:  # device buffers this machine cannot hold
        def __init__(self, ctx: object, coll: str, lay: object, dtype: object, inplace: bool) -> None:
            self.lay, self.recv = lay, torch.empty(0)

        def op(self) -> None: ...
        def fill_random(self) -> None: ...
        def fill_check(self, seed: int) -> None: ...
        def count_wrong(self, seed: int) -> int: return 0

    def timed(ctx: object, op: object, iters: int, graph_launches: int) -> tuple[float, list[float]]:
        calls.append(f"timed graph_launches={graph_launches}")
        return 10e-6, []  # a graph's replays are timed as a whole (C._timed)

    def events(ctx: object, op: object, iters: int) -> list[float]:
        calls.append("eager event pass")
        return [30e-6] * iters

    class Ctx(RankContext):
        def sync(self) -> None: ...

    monkeypatch.setattr(C, "Bench", Bench)
    monkeypatch.setattr(C, "_timed", timed)
    monkeypatch.setattr(C, "_event_times", events)
    ctx = Ctx(rank=0, world_size=2, local_rank=0, backend="nccl", device=torch.device("cuda", 0), host="n1")
    return C.collective(ctx, {**p, "collective": "all_reduce"}), calls


def test_a_graph_run_times_no_eager_per_iteration_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """per_iteration defaulted true beside cuda_graph: an eager event pass ran after the replays and its spread
    (30 us) was published beside the graph's headline (10 us)."""
    p = _graph_params(tmp_path)
    assert p["per_iteration"] is False and p["cuda_graph"] == 5  # defaulted: off beside a graph
    out, calls = _graph_rank(monkeypatch, p)
    assert calls == ["timed graph_launches=5"] and [r["iter_seconds"] for r in out["rows"]] == [[]]
    # params written before the parser turned it off (per_iteration: true with cuda_graph): still no eager pass
    out, calls = _graph_rank(monkeypatch, {**p, "per_iteration": True})
    assert calls == ["timed graph_launches=5"] and out["rows"][0]["iter_seconds"] == []


def test_a_graph_runs_iter_cv_is_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.errors import HarnessError
    from clustercheck.judging.limits import Limit
    from clustercheck.kinds.base import Answers, CheckSpec, Rules
    from clustercheck.run.judge import judge

    p = _graph_params(tmp_path)
    out, _ = _graph_rank(monkeypatch, p)
    check = CheckSpec("ar", "all_reduce", "node", p, (), 60.0, "", "suite.yaml", 2)
    answers = Answers(check, [out, out], [{"host": "n1"}, {"host": "n1"}], "gloo")
    ceiling = Limit("ar", "iter_cv", "<=", 0.5, "ratio", "<= 0.5", "test", "t.yaml:3")
    with pytest.raises(HarnessError, match=r"^ar: iter_cv is not judged: no per-iteration times were kept"):
        judge(answers, Rules({"iter_cv": ceiling}), {})  # was: iter_cv 0.0 of the eager pass, passed
    floor = Limit("ar", "busbw", ">=", 1.0, "GB/s", ">= 1", "test", "t.yaml:4")
    m = judge(answers, Rules({"busbw": floor}), {}).measurement
    assert math.isnan(m.metrics["iter_cv"]) and "iter_us" not in m.rows[0]  # no spread beside the headline


def test_per_iteration_written_beside_cuda_graph_is_refused_at_its_line(tmp_path: Path) -> None:
    """nccl-tests refuses -G with -I; written, per_iteration: true beside cuda_graph is one line, exit 4."""
    import subprocess
    import sys

    from clustercheck.errors import UserError

    with pytest.raises(UserError) as info:
        _graph_params(tmp_path, ", per_iteration: true")
    exc = info.value
    assert str(exc).startswith(f"{tmp_path / 'suite.yaml'}:4: checks[0].params.per_iteration: "), str(exc)
    assert "\n" not in str(exc) and "cuda_graph" in str(exc)
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "run", "suite.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "suite.yaml:4: checks[0].params.per_iteration: " in proc.stdout + proc.stderr
    assert _graph_params(tmp_path, ", per_iteration: false")["per_iteration"] is False  # said off: fine
