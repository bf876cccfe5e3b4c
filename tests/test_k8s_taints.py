"""Taints through the fake API server (tests/fake_kube.py): what `resume --k8s` lifts, and what it leaves."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import FakeCluster  # noqa: E402
from test_k8s_lost import cluster, kube  # noqa: E402, F401  (fixtures: a fake cluster of 3 nodes, its API)

pytest.importorskip("kubernetes")

KEY = "clustercheck.io/failed"


def test_resume_lifts_only_the_taint_clustercheck_set_and_leaves_an_operators_with_our_key(
        cluster: FakeCluster, kube: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """An operator's `clustercheck.io/failed=ticket-42:NoExecute` on a node clustercheck tainted was lifted with
    ours (every taint of our key went, whatever its effect and value)."""
    from clustercheck.run.k8s.taint import resume, taint

    taint({"kw-node-0": "node-ar busbw 0 < 1 GB/s"}, "run-a", dry_run=False, kube=kube)
    ticket = {"key": KEY, "value": "ticket-42", "effect": "NoExecute"}
    cluster.nodes["kw-node-0"]["spec"]["taints"].append(ticket)
    assert resume(None, dry_run=True, kube=kube) == 0
    dry = capsys.readouterr().out
    assert "would run: kubectl taint nodes kw-node-0 clustercheck.io/failed:NoSchedule-" in dry
    assert "left alone on kw-node-0: the taint clustercheck.io/failed=ticket-42:NoExecute, not the one clustercheck " \
           "set (clustercheck.io/failed=node-ar:NoSchedule)" in dry, dry
    assert resume(None, dry_run=False, kube=kube) == 0
    said = capsys.readouterr().out
    assert "untainted kw-node-0 (tainted by run run-a)" in said and "left alone on kw-node-0" in said, said
    node = cluster.nodes["kw-node-0"]
    assert node["spec"]["taints"] == [ticket], node["spec"]
    assert KEY not in node["metadata"]["labels"] and node["metadata"]["annotations"] == {}


def test_resume_leaves_our_key_with_another_value_on_a_node_we_tainted(
        cluster: FakeCluster, kube: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Our key and effect, but a value that is not our label's (an operator re-tainted it): not ours to lift."""
    from clustercheck.run.k8s.taint import resume, taint

    taint({"kw-node-1": "node-ar busbw 0 < 1 GB/s"}, "run-b", dry_run=False, kube=kube)
    theirs = {"key": KEY, "value": "hw-ticket-7", "effect": "NoSchedule"}
    cluster.nodes["kw-node-1"]["spec"]["taints"] = [theirs]
    assert resume(None, dry_run=False, kube=kube) == 0
    said = capsys.readouterr().out
    assert "left alone on kw-node-1: the taint clustercheck.io/failed=hw-ticket-7:NoSchedule" in said, said
    assert "no node is tainted by clustercheck" in said
    assert cluster.nodes["kw-node-1"]["spec"]["taints"] == [theirs]


def test_the_render_with_taint_says_how_to_remove_its_cluster_role_too() -> None:
    """`k8s render --taint` makes a ClusterRole and ClusterRoleBinding, which the printed removal line (namespaced
    kinds only) left behind, with get, list and patch on every node."""
    import subprocess

    import yaml

    def render(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "clustercheck", "k8s", "render", "cpu-smoke", "--nodes", "2",
                              "--image", "registry.example/cc:1", "--namespace", "burnin", *args],
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        return res.stdout

    out = render("--taint")
    cluster_scoped = [d for d in yaml.safe_load_all(out) if d and d["kind"].startswith("Cluster")]
    assert sorted(d["kind"] for d in cluster_scoped) == ["ClusterRole", "ClusterRoleBinding"]
    names = {d["metadata"]["name"] for d in cluster_scoped}
    assert names == {"burnin-clustercheck-controller-taint"}
    assert "#   and: kubectl delete clusterrole,clusterrolebinding burnin-clustercheck-controller-taint\n" in out, out[:800]
    assert "clusterrole" not in render().split("---")[0]


def test_a_check_id_of_non_ascii_letters_still_gives_a_taint_value(cluster: FakeCluster, kube: Any) -> None:
    """`ノード帯域` became '' (every character replaced, then trimmed): the taint `clustercheck.io/failed=:NoSchedule`,
    a label of no value, and nothing saying which check failed."""
    import hashlib

    from clustercheck.run.k8s.labels import label_value, label_value_ok
    from clustercheck.run.k8s.taint import taint

    value = label_value("ノード帯域")
    assert value == f"check-{hashlib.sha256('ノード帯域'.encode()).hexdigest()[:8]}" and label_value_ok(value)
    assert label_value("node-ar") == "node-ar" and label_value("ノード-ar") == "ar"
    done = taint({"kw-node-0": "ノード帯域 busbw 0 < 1 GB/s"}, "run-c", dry_run=False, kube=kube)
    assert {e["rc"] for e in done} == {0}, done
    assert cluster.nodes["kw-node-0"]["spec"]["taints"] == [{"key": KEY, "value": value, "effect": "NoSchedule"}]


def test_a_node_written_between_read_and_patch_is_read_again_and_tainted(
        cluster: FakeCluster, kube: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The kubelet writes the node (a new resourceVersion) after clustercheck read it, twice: the conditional
    patch is refused 409 Conflict, and was the node's end (rc 1, untainted); it is read, checked and sent again."""
    from clustercheck.run.k8s.taint import resume, taint

    cluster.written_after_read = {"kw-node-0": 2}
    done = taint({"kw-node-0": "node-ar busbw 0 < 1 GB/s"}, "run-d", dry_run=False, kube=kube)
    assert {e["rc"] for e in done} == {0}, done
    assert cluster.nodes["kw-node-0"]["spec"]["taints"] == [{"key": KEY, "value": "node-ar", "effect": "NoSchedule"}]
    cluster.written_after_read = {"kw-node-0": 2}  # resume lists the nodes, then reads kw-node-0 again on a conflict
    assert resume(None, dry_run=False, kube=kube) == 0, capsys.readouterr()
    assert "untainted kw-node-0" in capsys.readouterr().out
    assert cluster.nodes["kw-node-0"]["spec"]["taints"] == []


def test_the_taint_dry_run_reads_the_node_and_says_it_would_leave_someone_elses_alone(
        cluster: FakeCluster, kube: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """--taint-dry-run said `dry run` for the taint of a node that a real run leaves alone (our key, tainted by
    someone else): it reads the node as the real run does; without credentials it says it did not read it."""
    from clustercheck.run.k8s.taint import taint

    theirs = {"key": KEY, "value": "hw-ticket-9", "effect": "NoSchedule"}
    cluster.nodes["kw-node-1"]["spec"]["taints"] = [theirs]
    why = "node-ar busbw 0 < 1 GB/s"
    planned = taint({"kw-node-1": why, "kw-node-0": why}, "run-e", dry_run=True)
    assert planned[0]["rc"] is None and planned[0]["output"] == (
        "dry run: would leave it alone: already tainted clustercheck.io/failed=hw-ticket-9:NoSchedule by someone "
        "else (no clustercheck.io/run annotation)"), planned
    assert [e["output"] for e in planned[1:]] == ["dry run"] * 3
    assert cluster.nodes["kw-node-1"]["spec"]["taints"] == [theirs] and cluster.nodes["kw-node-0"]["spec"]["taints"] == []
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    unread = taint({"kw-node-1": why}, "run-e", dry_run=True)
    assert len(unread) == 3 and unread[0]["output"].startswith("dry run (the node was not read: no Kubernetes "
                                                               "credentials"), unread
