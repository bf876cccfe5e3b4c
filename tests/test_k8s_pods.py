"""What the agents' pods say through the API, read by JobPods and api (tests/fake_kube.py for the server):
indices, text the API hands back, pods that cannot be read, and two pods for one index."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import _now, cluster_fixture, kube_fixture  # noqa: E402

pytest.importorskip("kubernetes")


@pytest.mark.parametrize("raw, index", [("3", 3), ("²", None), ("٣", None), ("-1", None), ("", None), ("1234567", None)])
def test_a_completion_index_is_ascii_digits_only(raw: str, index: int | None) -> None:
    from clustercheck.run.k8s import api

    pod = SimpleNamespace(metadata=SimpleNamespace(annotations={api.INDEX_ANNOTATION: raw}, labels={}))
    assert api.index_of(pod) == index


cluster = cluster_fixture("kw-node-0", "kw-node-1")
kube = kube_fixture(answered=True)  # past the pre-flight: the server's failure is the harness's


def pod(cluster: Any, job: str, index: int, node: str | None, name: str = "", **status: Any) -> str:
    """A pod of `job`'s index `index` (no process behind it), on `node` (None: not scheduled)."""
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


def test_of_two_pods_for_one_index_the_live_replacement_counts(cluster: Any, kube: Any) -> None:
    """Index 0 has a Pending pod on kw-node-0 (the replacement) and a Failed one on kw-node-1, the latter listed
    last: the wait goes on (it stopped, as if every missing pod had ended), and the Pending pod's node is named."""
    from clustercheck.run.k8s.launcher import JobPods

    pod(cluster, "ee", 0, "kw-node-0", name="ee-0-zzzzz", phase="Pending", containerStatuses=[
        {"name": "agent", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"waiting": {"reason": "ContainerCreating"}}}])
    pod(cluster, "ee", 0, "kw-node-1", phase="Failed", containerStatuses=[
        {"name": "agent", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
         "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}])
    assert list(cluster.pods) == ["ee-0-zzzzz", "ee-0-abcde"]
    pods = JobPods(kube, "ee")
    assert pods.ended(set(), 1) is False
    why = pods.explain([0], {}, 5)
    assert list(why) == ["kw-node-0"] and "ContainerCreating" in why["kw-node-0"], why


def test_a_pod_of_an_earlier_job_of_the_same_name_is_not_this_jobs(cluster: Any, kube: Any) -> None:
    """A terminating pod of an earlier Job named ff (another controller-uid) is listed with this Job's: it is
    left out, so this Job's own Pending pod decides."""
    from clustercheck.run.k8s.launcher import JobPods

    pod(cluster, "ff", 0, "kw-node-0", name="ff-0-mine1", phase="Pending")
    old = pod(cluster, "ff", 0, "kw-node-1", name="ff-0-older", phase="Running")
    cluster.pods[old]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "earlier-job-uid"
    cluster.pods["ff-0-mine1"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] = "this-job-uid"
    pods = JobPods(kube, "ff", "this-job-uid")
    assert [p.metadata.name for p in pods.by_index().values()] == ["ff-0-mine1"]
    assert list(pods.explain([0], {}, 5)) == ["kw-node-0"]


HOSTILE = "0/3 nodes\x1b[2J\x1b[31m are available\nclustercheck: all 3 nodes PASS\x9b"


def _clean(text: str) -> bool:
    return not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def test_the_apis_words_are_escaped_where_they_are_read(cluster: Any, kube: Any) -> None:
    """A scheduler's, a kubelet's and an admission webhook's messages (and a node's name) holding ESC sequences
    and a newline reach no terminal raw: explain(), disrupted() and the FailedCreate words hold no control
    character, where a forged "clustercheck: all 3 nodes PASS" line was printed."""
    from clustercheck.run.k8s.launcher import JobPods

    pod(cluster, "gg", 0, None, phase="Pending", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": HOSTILE}])
    pod(cluster, "gg", 1, "kw-node-1\x1b[1m", phase="Failed", reason="Evicted", message=HOSTILE)
    cluster.event({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gg", "namespace": "default",
                                                                         "uid": "gg-uid"}},
                  "FailedCreate", f'pods "gg-2-xyz" is forbidden: {HOSTILE}')
    pods = JobPods(kube, "gg", "gg-uid")
    why = pods.explain([0, 1, 2], {}, 5)
    assert len(why) == 3 and all(_clean(k) and _clean(v) for k, v in why.items()), why
    assert any("\\x1b[2J" in v and "\\nclustercheck: all 3 nodes PASS" in v for v in why.values()), why
    assert "is forbidden" in why["gg-2"], why
    loss = pods.disrupted(1, "kw-node-1\x1b[1m")
    assert loss is not None and _clean(loss.why) and "Evicted" in loss.why, loss


def test_the_never_joined_line_is_escaped_whoever_explains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The controller's "never joined" line escapes what any Pods said (a backstop for the API's words)."""
    from clustercheck.run.join import JoinLauncher

    class Said:
        def ended(self, joined: Any, expected: int) -> bool:
            return True

        def explain(self, missing: list[int], bad: Any, timeout: float) -> dict[str, str]:
            return {"node\x1b[2J": HOSTILE}

    launcher = JoinLauncher.__new__(JoinLauncher)
    launcher.pods, launcher.expected, launcher.timeout = Said(), 2, 5.0
    launcher.members = {0: SimpleNamespace(index=0, node="kw-node-0", local_ranks=2)}  # type: ignore[dict-item]
    launcher._settle([1], {})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b[2J" in err, err


def test_a_wait_that_stopped_as_every_pod_ended_says_so_not_the_whole_timeout() -> None:
    """No agent joined, and the wait stopped at its first look because every agent pod had ended: the error says
    so, where it said "within 60 s" of a wait of seconds."""
    from clustercheck.errors import UserError
    from clustercheck.run.join import JoinLauncher

    class Ended:
        def ended(self, joined: Any, expected: int) -> bool:
            return True

        def explain(self, missing: list[int], bad: Any, timeout: float) -> dict[str, str]:
            return {f"kw-node-{i}": "pod never started its agent: ErrImagePull" for i in missing}

    from joining import free_port

    launcher = JoinLauncher(2, f"127.0.0.1:{free_port()}", 60, token="ab" * 32, gather=False, pods=Ended())
    try:
        launcher.open()
        with pytest.raises(UserError) as err:
            launcher.gather(every=0.0)
    finally:
        launcher.close()
    said = str(err.value)
    assert "every agent pod had ended after" in said and "of the 60 s wait" in said, said
    assert "within 60 s" not in said and "ErrImagePull" in said, said
