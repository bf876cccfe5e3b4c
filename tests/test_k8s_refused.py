"""An agent's pod that admission refused (a ResourceQuota, a LimitRange, PodSecurity) is never made: the Job
controller records a FailedCreate Event on the Job and tries again. The controller quotes that Event for the
index, and stops waiting once every missing index was refused so (or the Job failed), where it waited the whole
join timeout and then said only that no pod was found. Against the fake API server (tests/fake_kube.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Collection, Iterator, Mapping

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import FakeCluster, _now  # noqa: E402
from test_k8s_lost import cluster, kube  # noqa: E402,F401 (the fake cluster of three nodes, its client)
from joining import agent, finish, free_port, results, token  # noqa: E402
from test_k8s import k8s_run, own_address  # noqa: E402

pytest.importorskip("kubernetes")

QUOTA = ('is forbidden: exceeded quota: compute, requested: nvidia.com/gpu=8, used: nvidia.com/gpu=0, limited: '
         'nvidia.com/gpu=4')


def agents_job(kube: Any, nodes: int = 2) -> Any:
    from clustercheck.run.k8s import manifests

    return kube.create(manifests.job(manifests.Agents(name="cc", namespace="default", nodes=nodes, image="i",
                                                      controller="h:1")))


def test_an_index_quota_refused_is_named_by_the_failed_create_event_and_the_wait_stops(
        cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    cluster.fates = {0: "forbidden", 1: "forbidden"}
    job = agents_job(kube)
    assert cluster.pods == {} and len(cluster.events) == 2
    pods = JobPods(kube, "cc", job.uid)
    assert pods.ended([], 2)  # admission refuses it again on every try: nothing to wait for
    why = pods.explain([0, 1], {}, 600)
    assert set(why) == {"cc-0", "cc-1"}, why
    for i in (0, 1):
        assert why[f"cc-{i}"].startswith(f"no pod of Job cc for index {i} was made: the Job controller's latest "
                                         f'FailedCreate: Error creating: pods "cc-{i}-') and why[f"cc-{i}"].endswith(QUOTA), why
    # --launcher join --k8s-job: the Job's uid is read, so an Event of an earlier Job of that name is not quoted
    cluster.event({"kind": "Job", "apiVersion": "batch/v1", "metadata": {"name": "cc", "namespace": "default",
                                                                         "uid": "an-earlier-job"}},
                  "FailedCreate", 'Error creating: pods "cc-1-zzzzz" is forbidden: violates PodSecurity "restricted"')
    assert JobPods(kube, "cc").explain([1], {}, 600) == {"cc-1": why["cc-1"]}


def test_a_refused_index_is_waited_for_while_another_pod_may_still_start(cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    cluster.fates = {0: "image-pull", 1: "forbidden"}
    job = agents_job(kube)
    pods = JobPods(kube, "cc", job.uid)
    assert not pods.ended([], 2)  # index 0's image may yet be pulled
    assert pods.ended([0], 2)  # once it joined, only the refused index is missing
    why = pods.explain([0, 1], {}, 600)
    assert why["kw-node-0"].endswith("never started its agent: ImagePullBackOff: Back-off pulling image \"i\""), why
    assert QUOTA in why["cc-1"], why


def test_a_failed_create_that_is_no_refusal_is_quoted_and_waited_for(cluster: FakeCluster, kube: Any) -> None:
    """A timeout or the server's own error may pass on the Job controller's next try: quoted, but no early stop."""
    from clustercheck.run.k8s.launcher import JobPods

    cluster.fates = {0: "image-pull", 1: "image-pull"}
    job = agents_job(kube)
    for name in [n for n, p in cluster.pods.items() if p["metadata"]["labels"]["job-name"] == "cc"][1:]:
        del cluster.pods[name]  # index 1 never made
    said = "Error creating: Timeout: request did not complete within requested timeout"
    cluster.event(cluster.objects[("jobs", "default", "cc")], "FailedCreate", said)
    pods = JobPods(kube, "cc", job.uid)
    assert not pods.ended([0], 2)
    assert pods.explain([1], {}, 600) == {"cc-1": f"no pod of Job cc for index 1 was made: the Job controller's "
                                                  f"latest FailedCreate: {said}"}


def test_events_that_cannot_be_read_are_said_and_the_wait_goes_on(cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    cluster.fates = {0: "forbidden"}
    job = agents_job(kube, nodes=1)
    cluster.lacks = {("list", "events")}  # a Role of an earlier render, without it
    pods = JobPods(kube, "cc", job.uid)
    assert not pods.ended([], 1)  # not known: the whole timeout
    (why,) = pods.explain([0], {}, 600).values()
    assert why.startswith("no pod of Job cc for index 0 was found (the Job's Events, which say why a pod was not "
                          "made, could not be read: listing the events of Job cc: events is forbidden: User "), why


def test_a_failed_job_makes_no_more_pods_and_the_wait_stops(cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    cluster.fates = {0: "image-pull", 1: "image-pull"}
    job = agents_job(kube)
    for name in list(cluster.pods):
        del cluster.pods[name]  # none made yet
    pods = JobPods(kube, "cc", job.uid)
    assert not pods.ended([], 2)
    cluster.objects[("jobs", "default", "cc")]["status"] = {"conditions": [
        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer "
         "than specified deadline", "lastProbeTime": _now(), "lastTransitionTime": _now()}]}
    assert pods.ended([], 2)


def test_the_pods_are_looked_at_as_soon_as_an_agent_joins(tmp_path: Path) -> None:
    """Index 1 was refused and index 0's agent joins: the wait looks at the pods then and stops, where it looked
    only every 5 s (`every`: here longer than the whole --join-timeout, which it waited out). A real agent joins."""
    from clustercheck.run.join import JoinLauncher

    class Pods:
        def __init__(self) -> None:
            self.looked: list[list[int]] = []  # the agents joined at each look

        def ended(self, joined: Collection[int], expected: int) -> bool:
            self.looked.append(sorted(joined))
            return 0 in joined  # index 1 refused: once 0 joined, no pod is left to wait for

        def explain(self, missing: list[int], bad: Mapping[int, str], timeout: float) -> dict[str, str]:
            return {f"cc-{i}": "refused" for i in missing}

    port, secret = free_port(), token()
    pods = Pods()
    launcher = JoinLauncher(2, f"127.0.0.1:{port}", 30, secret, gather=False, pods=pods)
    launcher.open()
    joins = agent(tmp_path, secret, 0, "kw-node-0", f"127.0.0.1:{port}", "--local-ranks", "1")
    try:
        launcher.gather(every=600)
    finally:
        launcher.close()
        finish_agent = joins.wait(60)
    assert sorted(launcher.members) == [0] and launcher.absent == {"cc-1": "refused"}, launcher.absent
    assert launcher.ended_after is not None and pods.looked[0] == [] and pods.looked[-1] == [0], pods.looked
    assert finish_agent == 0


@pytest.mark.pool
def test_a_run_whose_index_the_quota_refused_names_it_with_the_event(cluster: FakeCluster, tmp_path: Path) -> None:
    """--launcher k8s, index 1 refused by a ResourceQuota: index 0 is measured, index 1 is absent (INCOMPLETE),
    named by the Job controller's FailedCreate."""
    cluster.fates = {1: "forbidden"}
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}", "-k", "not node-late", nodes=2)
    out = finish(ctl, [])
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-4000:]
    assert {r["node"] for r in data["results"] if r["scope"] == "node"} == {"kw-node-0"}, out[-4000:]
    ((pod, why),) = data["run"]["absent"].items()
    assert pod.startswith("clustercheck-") and pod.endswith("-1"), pod
    assert why.startswith(f"no pod of Job {pod.removesuffix('-1')} for index 1 was made: the Job controller's latest "
                          "FailedCreate: Error creating: pods ") and why.endswith(QUOTA), why
    assert cluster.objects == {}, out[-3000:]
