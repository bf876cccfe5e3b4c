"""What the baseline judged and this run did not measure, or measured of another card, never reads as a pass
of compare; a latency alone compares nothing; the noise band printed is the one applied. Each test failed
before its fix (an audit of compare with hostile copies of real records)."""

from __future__ import annotations

from pathlib import Path

from clustercheck.record.compare import compare, load_run
from clustercheck.record.compare_report import report_lines
from test_compare import cc, result, save, verdict


def _node(node: str, busbw: float = 100.0) -> dict:
    return result("ar", node, [verdict("busbw", busbw, ">=", 50, "GB/s")])


def test_a_node_the_baseline_measured_and_this_run_lacks_is_not_measured_now(tmp_path: Path) -> None:
    """A node that passed in the baseline and is missing now read `not compared ... not in this run`, exit 0,
    and `run --compare` said nothing of it."""
    from clustercheck.run.judge import Baseline

    base = save(tmp_path / "b", [_node("n1"), _node("n2"), result("skip", "n2", [], outcome="skipped")])
    now = save(tmp_path / "n", [_node("n1")])
    c = compare(load_run(base), load_run(now))
    assert c.unmeasured_now == [("gate::ar[n2]", "passed in the baseline, not in this run")]
    assert ("gate::skip[n2]", "not in this run (skipped in the baseline)") in c.not_compared
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "NOT MEASURED NOW  gate::ar[n2]: passed in the baseline, not in this run" in out.stdout
    said = Baseline(str(base), tmp_path, 0.05).said("cpu", load_run(now).results)
    assert [line for line in said if "not in this run" in line] == [
        "1 item(s) passed in the baseline and are not in this run (not measured now): gate::ar[n2]"]
    # an item of a suite this run did not run is lacked as well, as `compare` says (a dropped suite hides nothing)
    other = save(tmp_path / "o", [{**_node("n1"), "suite_file": "/x/suites/other.yaml"}])
    assert [line for line in Baseline(str(base), tmp_path, 0.05).said("cpu", load_run(other).results)
            if "not in this run" in line] == [
        "2 item(s) passed in the baseline and are not in this run (not measured now): gate::ar[n1], gate::ar[n2]"]


def _gpus(values: dict[str, float], unit: str = "GB/s", op: str = ">=") -> dict:
    return result("h2d", "n1", [{**verdict("busbw", value, op, 1, unit), "subject": gpu}
                                for gpu, value in values.items()])


def test_a_verdict_the_baseline_judged_and_this_run_lacks_is_never_a_pass(tmp_path: Path) -> None:
    """A GPU's verdict missing now, or one now in another unit family, was `not compared`, exit 0."""
    base = save(tmp_path / "b", [_gpus({"GPU0": 100.0, "GPU1": 100.0})])
    for name, now, why in (
            ("gone", _gpus({"GPU0": 100.0}), "busbw[GPU1]: not in this run"),
            ("unit", _gpus({"GPU0": 100.0, "GPU1": 100.0}) | {"verdicts": [
                {**verdict("busbw", 100.0, ">=", 1, "GB/s"), "subject": "GPU0"},
                {**verdict("busbw", 100.0, ">=", 1, "us"), "subject": "GPU1"}]}, "busbw[GPU1]: in GB/s in the baseline, us now"),
            ("turned", _gpus({"GPU0": 100.0, "GPU1": 100.0}) | {"verdicts": [
                {**verdict("busbw", 100.0, ">=", 1, "GB/s"), "subject": "GPU0"},
                {**verdict("busbw", 100.0, "<=", 200, "GB/s"), "subject": "GPU1"}]},
             "busbw[GPU1]: limit direction changed (>= -> <=)")):
        run = save(tmp_path / name, [now])
        c = compare(load_run(base), load_run(run))
        assert c.lost == [("gate::h2d[n1]", why)] and c.lost[0] in c.not_compared, name
        out = cc(str(base), str(run), cwd=tmp_path)
        assert out.returncode == 3, (name, out.stdout, out.stderr)
        assert f"NOT COMPARED  gate::h2d[n1]: {why}" in out.stdout, name
    # what is new in this run is no loss: said, and compare passes
    more = save(tmp_path / "more", [_gpus({"GPU0": 100.0, "GPU1": 100.0, "GPU2": 100.0})])
    c = compare(load_run(base), load_run(more))
    assert c.lost == [] and c.not_compared == [("gate::h2d[n1]", "busbw[GPU2]: not judged in the baseline")]
    out = cc(str(base), str(more), cwd=tmp_path)
    assert out.returncode == 0 and "not compared  gate::h2d[n1]: busbw[GPU2]" in out.stdout, out.stdout
    # an item whose every directional verdict the baseline judged is gone now: lost too
    bare = save(tmp_path / "bare", [result("h2d", "n1", [verdict("wrong", 0, "==", 0, "count")])])
    c = compare(load_run(base), load_run(bare))
    assert ("gate::h2d[n1]", "no measurement in this run (passed)") in c.lost
    assert cc(str(base), str(bare), cwd=tmp_path).returncode == 3


def _cards(values: dict[str, tuple[str, float]], limit: float = 1) -> dict:
    """One item of per-GPU busbw verdicts, each GPU's row naming its card's PCI bus id: {GPU: (bus id, GB/s)}."""
    vs = [{**verdict("busbw", value, ">=", limit, "GB/s"), "subject": gpu} for gpu, (_, value) in values.items()]
    rows = [{"subject": gpu, "metric": "busbw", "min": value, "max": value, "median": value, "bus_id": bus}
            for gpu, (bus, value) in values.items()]
    return {**result("h2d", "n1", vs), "rows": rows}


A, B, C = "0000:19:00.0", "0000:3b:00.0", "0000:5e:00.0"


def test_per_gpu_verdicts_are_matched_by_the_cards_bus_id(tmp_path: Path) -> None:
    """With CUDA_VISIBLE_DEVICES reordered, GPU0 and GPU1 are other cards: matched by index, card A falling from
    100 to 80 GB/s read `same` twice, exit 0."""
    base = save(tmp_path / "b", [_cards({"GPU0": (A, 100.0), "GPU1": (B, 80.0)})])
    swapped = save(tmp_path / "s", [_cards({"GPU0": (B, 100.0), "GPU1": (A, 80.0)})])
    c = compare(load_run(base), load_run(swapped))
    assert sorted((ch.metric, ch.baseline, ch.current, ch.kind) for ch in c.changes) == [
        (f"busbw[GPU0 = {B}, GPU1 in the baseline]", 80.0, 100.0, "improvement"),
        (f"busbw[GPU1 = {A}, GPU0 in the baseline]", 100.0, 80.0, "regression")]
    assert cc(str(base), str(swapped), cwd=tmp_path).returncode == 1
    # a verdict that passed for card A and fails for it now is FAILED NOW whatever index it has
    failing = save(tmp_path / "f", [_cards({"GPU0": (B, 100.0), "GPU1": (A, 80.0)}, limit=90)])
    assert compare(load_run(base), load_run(failing)).failed_now == [
        ("gate::h2d[n1]", f"busbw[GPU1 = {A}, GPU0 in the baseline] passed in the baseline (100), fails now "
                          "(80 GB/s, >= 90)")]
    # a card the baseline measured and this run did not: never a pass, both bus ids named
    other = save(tmp_path / "o", [_cards({"GPU0": (A, 100.0), "GPU1": (C, 80.0)})])
    c = compare(load_run(base), load_run(other))
    assert c.lost == [("gate::h2d[n1]", f"busbw[GPU1]: card {B} not in this run (GPU1 is {C} now)")]
    assert ("gate::h2d[n1]", f"busbw[GPU1]: not judged in the baseline (card {C})") in c.not_compared
    assert [(ch.metric, ch.kind) for ch in c.changes] == [("busbw[GPU0]", "same")]
    assert cc(str(base), str(other), cwd=tmp_path).returncode == 3
    # a run whose rows name no bus id is matched by index, as before
    bare = save(tmp_path / "n", [_gpus({"GPU0": 100.0, "GPU1": 80.0})])
    assert [ch.kind for ch in compare(load_run(base), load_run(bare)).changes] == ["same", "same"]


def test_a_latency_alone_compares_nothing(tmp_path: Path) -> None:
    """The only metric compared was a latency, which compare leaves to its limit: exit 0, not 5."""
    def small(time_us: float) -> dict:
        return {**result("lat", "n1", [verdict("time_us", time_us, "<=", 5000, "us")]), "judged_at": 8}

    base, now = save(tmp_path / "b", [small(600.0)]), save(tmp_path / "n", [small(300.0)])
    c = compare(load_run(base), load_run(now))
    assert [ch.kind for ch in c.changes] == ["latency"] and not c.compared
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 5, out.stdout + out.stderr
    both = save(tmp_path / "m", [small(300.0), _node("n1")])
    base2 = save(tmp_path / "b2", [small(600.0), _node("n1")])
    assert cc(str(base2), str(both), cwd=tmp_path).returncode == 0  # a busbw beside it was compared


def test_the_noise_band_printed_is_the_one_applied(tmp_path: Path) -> None:
    """A -24.4% drop read REGRESSION next to `spread +-56.6%, counted up to +-25%`: the band is a factor (1.25x,
    -20%..+25%), and the line now says so; -20% is within it, -24.4% is not, +25% is."""
    def timed(busbw: float, cv: float) -> dict:
        return {**result("ar", "n1", [verdict("busbw", busbw, ">=", 1, "GB/s")]),
                "metrics": {"busbw": {"value": busbw, "unit": "GB/s"}, "iter_cv": {"value": cv, "unit": "ratio"}}}

    base = save(tmp_path / "b", [timed(100.0, 0.283)])  # spread 2 x 0.283 = +-56.6%
    kinds = {}
    for now in (75.6, 80.0, 125.0):
        run = save(tmp_path / f"n{now}", [timed(now, 0.01)])
        (ch,) = compare(load_run(base), load_run(run)).changes
        kinds[now] = ch.kind
        assert ch.why() == "; the baseline's own spread +-56.6%, counted as a factor up to 1.25x: -20.0%..+25.0%"
    assert kinds == {75.6: "regression", 80.0: "noise", 125.0: "noise"}
    out = cc(str(base), str(tmp_path / "n75.6"), cwd=tmp_path)
    assert "-24.4%" in out.stdout and "counted as a factor up to 1.25x: -20.0%..+25.0%" in out.stdout, out.stdout
    # a spread under the cap is printed as the band it excuses too
    small = save(tmp_path / "s", [timed(100.0, 0.101)])
    (ch,) = compare(load_run(small), load_run(save(tmp_path / "m", [timed(90.0, 0.01)]))).changes
    assert ch.kind == "noise" and ch.why().endswith("+-20.2%, counted as a factor: -16.8%..+20.2%")
