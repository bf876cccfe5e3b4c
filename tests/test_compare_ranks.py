"""An item measured with another number of ranks on its nodes is no like-for-like reference, whatever its
scope: a node's all_reduce over 8 ranks in the baseline and 2 now was compared number for number, exit 0
(record/likeness.py checked rank counts for scope cluster only). Real records, the real `compare` command."""

from __future__ import annotations

import json
from pathlib import Path

from clustercheck.record.compare import compare, load_run
from clustercheck.record.likeness import measured_elsewhere
from test_compare import cc, result, save, verdict


def _pool(ranks: int, hosts: tuple[str, ...] = ("n1",)) -> dict:
    return {"number": 1, "backend": "gloo", "ranks": [{"rank": r, "host": hosts[r % len(hosts)], "local_rank": r}
                                                       for r in range(ranks)]}


def _item(node: str = "n1", ranks: int | None = None, hosts: tuple[str, ...] = ("n1",)) -> dict:
    entry = result("ar", node, [verdict("busbw", 100.0, ">=", 50, "GB/s")])
    return {**entry, "pool": _pool(ranks, hosts)} if ranks else entry


def _with_header(run_dir: Path, **header: object) -> Path:
    path = run_dir / "run.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0].update(header)
    path.write_text("".join(json.dumps(x, sort_keys=True) + "\n" for x in lines))
    return run_dir


def test_a_node_item_measured_with_other_ranks_is_not_compared(tmp_path: Path) -> None:
    base = save(tmp_path / "b", [_item(ranks=8)])
    now = save(tmp_path / "n", [_item(ranks=2)])
    c = compare(load_run(base), load_run(now))
    assert c.no_reference == [("gate::ar[n1]", "measured on other nodes/ranks/hardware (8 rank(s) on its node(s) in "
                                               "the baseline, 2 now)")]
    assert not c.changes
    out = cc(str(base), str(now), cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    # as many ranks: compared
    same = save(tmp_path / "s", [_item(ranks=8)])
    assert compare(load_run(base), load_run(same)).changes and not compare(load_run(base), load_run(same)).no_reference


def test_only_the_ranks_on_the_items_own_nodes_count(tmp_path: Path) -> None:
    """A node item of a 2-node run and of a 4-node run, 2 ranks on its node in both: the same measurement."""
    base = save(tmp_path / "b", [_item(ranks=8, hosts=("n1", "n2", "n3", "n4"))])
    now = save(tmp_path / "n", [_item(ranks=4, hosts=("n1", "n2"))])
    assert not compare(load_run(base), load_run(now)).no_reference
    # a pair item: the ranks on its two nodes
    pair = {"node": "n1,n2", "nodes": ["n1", "n2"], "scope": "pair"}
    was, are = {**pair, "pool": _pool(8, ("n1", "n2", "n3", "n4"))}, {**pair, "pool": _pool(8, ("n1", "n2"))}
    assert measured_elsewhere(was, are, {}, {}) == ("measured on other nodes/ranks/hardware (4 rank(s) on its node(s) "
                                                   "in the baseline, 8 now)")


def test_without_a_pool_the_headers_ranks_per_node_decide(tmp_path: Path) -> None:
    """The scratch case: no pool ranks to count (an older record): a node item of ranks_per_node 8 then, 2 now."""
    base = _with_header(save(tmp_path / "b", [_item()]), ranks=8, ranks_per_node=8)
    now = _with_header(save(tmp_path / "n", [_item()]), ranks=2, ranks_per_node=2)
    c = compare(load_run(base), load_run(now))
    assert c.no_reference == [("gate::ar[n1]", "measured on other nodes/ranks/hardware (8 ranks per node in the "
                                               "baseline, 2 now)")]
    assert cc(str(base), str(now), cwd=tmp_path).returncode == 3


def test_run_compare_puts_the_ranks_in_its_item(tmp_path: Path) -> None:
    """`run --compare`: Baseline.regressions gives measured_elsewhere the pool that measured the item now."""
    from clustercheck.judging.measurement import Measurement, Outcome
    from clustercheck.run.judge import Baseline
    from clustercheck.suite.load import load_suite

    base = save(tmp_path / "b", [_item(ranks=8)])
    suite = tmp_path / "gate.yaml"
    suite.write_text("checks:\n  - id: ar\n    measure: all_reduce\n    scope: node\n")
    check = load_suite(suite, str(suite)).checks[0]
    baseline = Baseline(str(base), tmp_path, 0.05)
    baseline.now = {"platform": "cpu"}
    outcome = Outcome(Measurement({"busbw": 100.0}, {"busbw": "GB/s"}), [], _pool(2))
    verdicts, notes = baseline.regressions(check, "gate::ar[n1]", outcome, ["n1"])
    assert verdicts == [] and any("8 rank(s) on its node(s) in the baseline, 2 now" in n for n in notes), notes
