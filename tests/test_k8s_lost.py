"""Kubernetes ends an agent's pod mid-run (evicted, preempted, OOM-killed, deleted): that is the orchestrator's or
the harness's doing, never the node's, so the node is not measured, never on exclude.txt, never tainted; a node
that went NotReady (the taint manager) stays unreachable. Against the fake API server (tests/fake_kube.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import FakeCluster, _now, cluster_fixture, kube_fixture  # noqa: E402
from joining import finish, free_port, results, wait_for  # noqa: E402
from test_k8s import k8s_run, own_address  # noqa: E402

pytest.importorskip("kubernetes")


cluster = cluster_fixture("kw-node-0", "kw-node-1", "kw-node-2")
kube = kube_fixture()


def running_pod(cluster: FakeCluster, job: str, index: int, **status: Any) -> str:
    """A pod of `job`'s index `index` on kw-node-<index>, Running (no process behind it)."""
    name = f"{job}-{index}-abcde"
    labels = {"job-name": job, "batch.kubernetes.io/job-name": job, "batch.kubernetes.io/job-completion-index": str(index)}
    cluster.pods[name] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": "u" * 16, "labels": labels,
                     "annotations": {"batch.kubernetes.io/job-completion-index": str(index)},
                     "resourceVersion": "1", "creationTimestamp": _now()},
        "spec": {"containers": [{"name": "agent", "image": "x"}], "nodeName": f"kw-node-{index}"},
        "status": {"phase": "Running", **status}}
    return name


STOPPED = "its agent was stopped by SIGTERM (pod deleted, evicted or preempted): not a fault of the node"


@pytest.mark.parametrize("how, stopped, said, blamed", [
    ("evicted", "", "pod cc-1-abcde is Failed (Evicted: The node was low on resource: memory. Threshold quantity", False),
    ("preempted", "", "Kubernetes is ending pod cc-1-abcde (PreemptionByScheduler: default-scheduler: preempting", False),
    ("oom", "", "pod cc-1-abcde's agent container ended (exit code 137, OOMKilled)", False),
    ("agent-bug", "", "pod cc-1-abcde's agent ended with exit code 70 (clustercheck's own error, not the node's)", False),
    ("crashed", "", None, True),  # exit 1: a crash a GPU fault may cause; the node's silence stands
    ("deleted", "", None, True),  # gone, no word from its agent: the pod GC removes a deleted node's pods too
    # gone after its agent said SIGTERM: deleted, evicted or preempted (a deleted node's pods get no SIGTERM)
    ("deleted", "SIGTERM", STOPPED, False),
    ("preempted then removed", "SIGTERM", STOPPED, False),
    ("preempted then removed", "", None, True),
    ("node-not-ready", "SIGTERM", "Kubernetes is ending pod cc-1-abcde (DeletionByTaintManager: Taint manager", True),
])
def test_how_kubernetes_ended_a_pod_says_whether_its_node_is_to_blame(
        cluster: FakeCluster, kube: Any, how: str, stopped: str, said: str | None, blamed: bool) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    running_pod(cluster, "cc", 0)
    running_pod(cluster, "cc", 1)
    pods = JobPods(kube, "cc")
    assert pods.disrupted(1, "kw-node-1") is None  # runs, as far as the API knows: its silence is all there is
    cluster.disrupt(1, how.removesuffix(" then removed"))
    if how.endswith(" then removed"):  # the pod object is gone seconds after its SIGTERM
        cluster.pods.pop("cc-1-abcde")
    loss = pods.disrupted(1, "kw-node-1", stopped)
    if said is None:
        assert loss is None, loss  # not known: the node stays unreachable, on the exclusion list
        return
    assert loss is not None and loss.blamed is blamed and said in loss.why, loss
    if not blamed and said != STOPPED:
        assert loss.why.endswith("Kubernetes or the harness ended its agent, not a fault of the node (not measured, "
                                 "never excluded)")
    assert pods.disrupted(0, "kw-node-0") is None


def test_a_pod_evicted_before_its_agent_joined_is_named_with_the_kubelets_reason(cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    running_pod(cluster, "cc", 0, reason="Evicted", message="The node had condition: [DiskPressure].")
    cluster.pods["cc-0-abcde"]["status"]["phase"] = "Failed"
    why = JobPods(kube, "cc").explain([0], {}, 10)
    assert why == {"kw-node-0": "pod cc-0-abcde never started its agent: Evicted: The node had condition: "
                                "[DiskPressure]."}, why


@pytest.mark.pool
def test_a_pod_evicted_or_deleted_mid_run_is_not_measured_never_excluded_nor_tainted(cluster: FakeCluster,
                                                                                      tmp_path: Path) -> None:
    """While the ranks wait before node-ar (a test-only delay) the kubelet evicts index 1's pod, and index 2's is
    deleted (kubectl delete pod, a drain's eviction, a preemption): its pod object is gone within seconds of its
    SIGTERM. Each agent goes silent; the controller reads index 1's pod (Evicted) and index 2's agent's own words
    ("stopped by SIGTERM"): both nodes' items are errors saying so, neither is on exclude.txt nor tainted
    (--taint), where the deleted one was excluded and tainted as unreachable or dead, and kw-node-0 keeps its
    verdicts. One run for both: each is a whole k8s run of some 20 s."""
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}", "--taint",
                  "--cc-inject-fault=node-ar:delay")
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 240)
        cluster.disrupt(1, "evicted")
        cluster.disrupt(2, "deleted")
        assert all(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] != "2"
                   for p in cluster.pods.values())  # the deleted pod's object is gone
    finally:
        out = finish(ctl, [])
    data = results(tmp_path)
    outcome = {r["name"]: r for r in data["results"]}
    for node in ("kw-node-1", "kw-node-2"):
        for item in (f"node-ar[{node}]", f"node-late[{node}]"):  # its ranks killed as the pod ended, or lost
            assert outcome[item]["outcome"] == "error" and not outcome[item].get("unreachable"), \
                (outcome[item], out[-4000:])
        assert cluster.nodes[node]["spec"]["taints"] == [], cluster.nodes[node]
        assert node not in (data.get("lost") or {})
        assert f"not measured: {node}" in out, out[-3000:]
    # the first item: the first rank killed, then its agent's own last words saying who killed it (was: "no output")
    assert "[clustercheck agent on kw-node-1: stopped by SIGTERM, so it killed this rank]" in \
        outcome["node-ar[kw-node-1]"]["message"], outcome["node-ar[kw-node-1]"]
    evicted = outcome["node-late[kw-node-1]"]["message"].splitlines()[0]
    assert evicted.startswith("not measured: kw-node-1 was lost during node-") and "(Evicted: The node was low on " \
        "resource: memory." in evicted and "not a fault of the node" in evicted, evicted
    assert STOPPED in outcome["node-late[kw-node-2]"]["message"], outcome["node-late[kw-node-2]"]
    assert outcome["node-ar[kw-node-0]"]["outcome"] == outcome["node-late[kw-node-0]"]["outcome"] == "passed", \
        out[-4000:]
    excluded = tmp_path / "out" / "latest" / "exclude.txt"
    assert not excluded.exists() or not {"kw-node-1", "kw-node-2"} & set(excluded.read_text().split()), \
        excluded.read_text()
    assert ctl.returncode == Exit.ERROR and data["verdict"] == "ERROR", out[-3000:]


@pytest.mark.pool
def test_one_agent_pod_failing_does_not_end_the_other_agents(cluster: FakeCluster, tmp_path: Path) -> None:
    """Index 1's agent is OOM-killed mid-run. With `backoffLimit: 0` that one failed pod failed the whole Job,
    and the Job controller terminated every other agent pod: every node went silent, unmeasured (on exclude.txt
    before lost pods were read). With `backoffLimitPerIndex: 0` only index 1 fails: the others are measured."""
    from clustercheck.run.k8s import manifests

    spec = manifests.job(manifests.Agents(name="cc", namespace="default", nodes=3, image="i", controller="h:1"))["spec"]
    assert (spec.get("backoffLimit"), spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (None, 0, 3)
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}", "--cc-inject-fault=node-ar:delay")
    try:
        wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 240)
        cluster.disrupt(1, "oom")
    finally:
        out = finish(ctl, [])
    outcome = {r["name"]: r for r in results(tmp_path)["results"]}
    assert cluster.jobs_failed == [], out[-3000:]
    for node in ("kw-node-0", "kw-node-2"):
        assert outcome[f"node-ar[{node}]"]["outcome"] == outcome[f"node-late[{node}]"]["outcome"] == "passed", out[-4000:]
    late = outcome["node-late[kw-node-1]"]
    assert late["outcome"] == "error" and not late.get("unreachable") and "OOMKilled" in late["message"], late
    assert ctl.returncode == Exit.ERROR, out[-3000:]


def test_a_server_that_never_answers_the_deletes_cannot_hold_the_controller(cluster: FakeCluster, tmp_path: Path) -> None:
    """SIGTERM while the agents are awaited, and the API server never answers a DELETE: every call has a timeout
    and the cleanup a deadline, so the controller says what it could not delete and how to, and ends
    (INCOMPLETE), where it waited for ever with SIGINT and SIGTERM held back (only SIGKILL ended it)."""
    import signal
    import time

    cluster.fates = {0: "image-pull", 1: "image-pull", 2: "image-pull"}
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}", timeout="120")
    end = time.monotonic() + 60
    while len(cluster.objects) < 3 and time.monotonic() < end:
        time.sleep(0.1)
    assert len(cluster.objects) == 3
    cluster.hang = {"DELETE"}
    ctl.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    time.sleep(2)
    ctl.send_signal(signal.SIGTERM)  # a second one, while the deletes hang: held, and the cleanup still ends
    out = finish(ctl, [], timeout=90)
    from clustercheck.run.k8s.launcher import CLEANUP_S

    assert ctl.returncode == Exit.INCOMPLETE and time.monotonic() - t0 < CLEANUP_S + 10, out[-3000:]
    name = next(iter(cluster.objects))[2].removesuffix("-token")
    assert f"clustercheck: could not delete Job {name} (timed out)" in out, out[-3000:]
    assert f"remove what is left with kubectl delete -n default job,service,secret -l clustercheck.io/run={name}" \
        in out, out[-3000:]
    assert cluster.hung and "Traceback" not in out


class DeletesHeard:
    """A stand-in for api.Kube's delete, recording the deletes as the server hears them: `unanswered` kinds are
    answered only once every delete was sent (a server that answers none of them), or after `hold` s."""

    namespace = "default"

    def __init__(self, unanswered: set[str], hold: float = 20.0) -> None:
        import threading

        self.unanswered, self.hold = unanswered, hold
        self.sent: list[str] = []
        self.answered: list[str] = []
        self.all_sent = threading.Event()

    def delete(self, made: Any, timeout: tuple[float, float]) -> str:
        self.sent.append(made.kind)
        if len(self.sent) == 3:
            self.all_sent.set()
        if made.kind in self.unanswered:
            return "" if self.all_sent.wait(self.hold) else "timed out"
        self.answered.append(made.kind)
        return ""


def closed(kube: DeletesHeard, capsys: pytest.CaptureFixture[str]) -> str:
    """K8sLauncher.close() of a run that made a Secret, a Service and a Job (in that order), through `kube`."""
    from types import SimpleNamespace

    from clustercheck.run.k8s import api
    from clustercheck.run.k8s.launcher import K8sLauncher

    launcher = K8sLauncher.__new__(K8sLauncher)
    launcher._closed = True  # the agents have left: no store here
    launcher._deleted, launcher.kube = False, kube  # type: ignore[assignment]
    launcher.agents = SimpleNamespace(name="cc")  # type: ignore[assignment]
    launcher.made = [api.Made("Secret", "cc-token", "u1"), api.Made("Service", "cc", "u2"), api.Made("Job", "cc", "u3")]
    launcher.close()
    return capsys.readouterr().err


def test_the_deletes_go_job_first_each_once_the_one_before_was_answered(capsys: pytest.CaptureFixture[str]) -> None:
    kube = DeletesHeard(set())
    assert closed(kube, capsys) == "clustercheck: deleted Job, Service and Secret cc\n"
    assert kube.sent == kube.answered == ["Job", "Service", "Secret"]


def test_a_delete_the_server_leaves_unanswered_does_not_hold_back_the_next(capsys: pytest.CaptureFixture[str]) -> None:
    """The Job's delete is never answered while the others wait their turn: the Service's and the Secret's are sent
    meanwhile (a server that answers none holds the cleanup one call's timeout, where it was each call's in turn)."""
    kube = DeletesHeard({"Job"})
    assert closed(kube, capsys) == "clustercheck: deleted Job, Service and Secret cc\n"
    assert kube.sent == ["Job", "Service", "Secret"] and kube.answered == ["Service", "Secret"]


def test_a_server_error_after_the_preflight_is_a_harness_error_not_bad_input(cluster: FakeCluster, tmp_path: Path) -> None:
    """The pre-flight passed (every dry run admitted), then the API server fails the real create of the Job
    with a 500: the server's failure is the harness's (exit 3), where it was told as bad input (exit 4); what
    was made is deleted."""
    cluster.fail = {("POST", "jobs", False)}
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}")
    out = finish(ctl, [], timeout=120)
    assert ctl.returncode == Exit.ERROR, out[-3000:]
    assert "the Kubernetes API failed: Internal error occurred: etcdserver: request timed out" in out, out[-3000:]
    assert "Traceback" not in out and cluster.objects == {}, out[-3000:]
