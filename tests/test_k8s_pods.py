"""What the agents' pods say through the API, read by JobPods and api (tests/fake_kube.py for the server):
indices, text the API hands back, pods that cannot be read, and two pods for one index."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip("kubernetes")


@pytest.mark.parametrize("raw, index", [("3", 3), ("²", None), ("٣", None), ("-1", None), ("", None), ("1234567", None)])
def test_a_completion_index_is_ascii_digits_only(raw: str, index: int | None) -> None:
    from clustercheck.run.k8s import api

    pod = SimpleNamespace(metadata=SimpleNamespace(annotations={api.INDEX_ANNOTATION: raw}, labels={}))
    assert api.index_of(pod) == index


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    from fake_kube import FakeCluster

    c = FakeCluster(tmp_path, nodes=("kw-node-0", "kw-node-1"))
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def kube(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    from fake_kube import connect

    made = connect(cluster, monkeypatch)
    made.answered = True  # past the pre-flight: the server's failure is the harness's
    return made


def pod(cluster: Any, job: str, index: int, node: str | None, name: str = "", **status: Any) -> str:
    """A pod of `job`'s index `index` (no process behind it), on `node` (None: not scheduled)."""
    from fake_kube import _now

    name = name or f"{job}-{index}-abcde"
    labels = {"job-name": job, "batch.kubernetes.io/job-completion-index": str(index)}
    cluster.pods[name] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels,
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                     "resourceVersion": "1", "creationTimestamp": _now()},
        "spec": {"containers": [{"name": "agent", "image": "x"}], **({"nodeName": node} if node else {})},
        "status": status}
    return name


def test_a_lost_agents_pod_that_cannot_be_read_blames_its_node_and_says_so(cluster: Any, kube: Any) -> None:
    """The pods listing answers 500 while a lost agent's pod is read: its node is still blamed (nothing says
    otherwise), and the why names the failed read, where it read as a pod that still runs."""
    from clustercheck.run.k8s.launcher import JobPods
    from clustercheck.run.launcher import Launcher, Loss
    from clustercheck.run.losses import Losses

    pod(cluster, "dd", 1, "kw-node-1", phase="Running")
    cluster.fail = {("GET", "pods", False)}
    loss = JobPods(kube, "dd").disrupted(1, "kw-node-1")
    assert loss is not None and loss.blamed and "could not be read" in loss.why and "etcdserver" in loss.why, loss

    class Plane(Launcher):
        def loss(self, node: str) -> Loss | None:
            return loss

    losses, plane = Losses(["kw-node-1"]), Plane()
    losses.ask(plane, ["kw-node-1"])
    why = losses.why(plane, "kw-node-1")
    assert "could not be read" in why and "kw-node-1" not in losses.excused, why
