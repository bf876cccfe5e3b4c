"""A node lost in a repeated run (--repeat, --duration) is named by repetition: the items it costs say in
which repetition it was lost, the exclusion list's reason says so, and the terminal's `not measured:` line
names each item by its repetition (run/runner.py `Runner.lose`, record/exclude.py). A real run through the
hosts launcher."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from joining import LIMITS, all_reduce_suite, kill_mid_run, results  # noqa: E402
from test_hosts_agents import agent_pid, run  # noqa: E402

pytestmark = pytest.mark.pool  # whole runs with real rank pools


def test_a_node_lost_in_a_burn_in_is_named_by_repetition(tmp_path: Path) -> None:
    """Three repetitions of `first` and `node-ar`; h3's agent is killed while node-ar's ranks wait in
    repetition 2 (a test-only delay there only). Repetition 3's h3 items say h3 was lost during node-ar in
    repetition 2, the exclusion reason names repetition 2, and `not measured:` lists h3's items each with its
    repetition. Failed before the fix: no repetition anywhere, and node-ar[h3] twice, indistinguishable."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(LIMITS)
    (tmp_path / "s.yaml").write_text(all_reduce_suite("first:node", "node-ar:node"))
    ctl = run(tmp_path, "--repeat", "3", "--cc-inject-fault=node-ar:delay#2", "--no-progress", hosts="h[1-3]")
    out = kill_mid_run(ctl, tmp_path / "out" / "latest" / "run.jsonl", lambda: agent_pid("h3", ctl.pid),
                       after='"repeat": 2')
    data = results(tmp_path)
    rep3 = {r["name"]: r for r in data["results"] if r.get("repeat") == 3}
    for name in ("first[h3]", "node-ar[h3]"):
        item = rep3[name]
        assert item["outcome"] == "error" and item["unreachable"] == ["h3"], (name, item, out[-3000:])
        assert item["message"].startswith("not measured: h3 was lost during node-ar in repetition 2 ("), item["message"]
    assert all(rep3[f"{c}[{n}]"]["outcome"] == "passed" for c in ("first", "node-ar") for n in ("h1", "h2"))
    assert "h3: node-ar in repetition 2: stopped answering" in out, out[-3000:]
    assert "h3: node-ar[h3]#2, first[h3]#3, node-ar[h3]#3" in out, out[-3000:]
    assert (tmp_path / "out" / "latest" / "exclude.txt").read_text().split() == ["h3"]
    assert data["verdict"] == "ERROR" and ctl.returncode == Exit.ERROR
    assert "Traceback" not in out
