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
    # an item of a suite this run did not run is no item it lacks: said once as suites that differ, not here
    other = save(tmp_path / "o", [{**_node("n1"), "suite_file": "/x/suites/other.yaml"}])
    assert not any("not in this run" in line for line in Baseline(str(base), tmp_path, 0.05).said(
        "cpu", load_run(other).results))
