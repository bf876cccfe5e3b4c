"""What an audit of `--launcher k8s` found: a Job the API server stored but never confirmed (its create timed out,
or answered 5xx) was left behind, suspended, for good; a Job failed by FailedIndexes (every index ended, one
failed: the lost agent's own crash) excused that crash; a 429 after the pre-flight was bad input (exit 4).
Against the fake API server (tests/fake_kube.py): the client, urllib3 and JSON are the real ones."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import FakeCluster, cluster_fixture, connect, status  # noqa: E402
from joining import free_port  # noqa: E402
from test_k8s import IMAGE, own_address  # noqa: E402

pytest.importorskip("kubernetes")

cluster = cluster_fixture("kw-node-0", "kw-node-1", "kw-node-2")


def _server_says(cluster: FakeCluster, method: str, suffix: str, code: int, reason: str, message: str,
                 store: bool = True) -> None:
    """The real (not dry-run) `method` on a path ending in `suffix` is answered `code`, after the server did what
    it does (`store`: a 500 of etcd's timeout after the write was made), or instead of it."""
    handle = cluster.handle

    def answer(m: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        if m == method and path.endswith(suffix) and query.get("dryRun") != ["All"]:
            if store:
                handle(m, path, query, body)
            return code, status(code, reason, message)
        return handle(m, path, query, body)

    cluster.handle = answer  # type: ignore[method-assign, assignment]


def _launch(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> Any:
    from clustercheck.run.k8s.launcher import K8sLauncher

    return K8sLauncher(1, f"{own_address()}:{free_port()}", 5, image=IMAGE, kube=connect(cluster, monkeypatch))


def test_a_job_stored_but_answered_500_is_read_back_and_deleted(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _server_says(cluster, "POST", "/jobs", 500, "InternalError", "Internal error occurred: etcdserver: request timed out")
    with pytest.raises(HarnessError, match="the Kubernetes API failed"):
        _launch(cluster, monkeypatch)
    err = capsys.readouterr().err
    assert cluster.objects == {}, (err, list(cluster.objects))
    assert "clustercheck: deleted Job clustercheck-" in err, err
    deletes = [r for r in cluster.requests if r[0] == "DELETE"]
    assert len(deletes) == 1 and "/jobs/clustercheck-" in deletes[0][1]


def test_a_job_create_left_unanswered_is_read_back_and_deleted_by_its_uid(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from clustercheck.run.k8s import api

    monkeypatch.setattr(api, "REQUEST_TIMEOUT", (5.0, 2.0))  # the create's answer comes 4 s after the Job is stored
    cluster.answer_after = {"jobs": 4.0}
    with pytest.raises(HarnessError, match="timed out"):
        _launch(cluster, monkeypatch)
    err = capsys.readouterr().err
    assert cluster.objects == {} and "clustercheck: deleted Job clustercheck-" in err, (err, list(cluster.objects))


def test_an_unanswered_job_that_cannot_be_read_is_named_with_the_kubectl_line(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _server_says(cluster, "POST", "/jobs", 503, "ServiceUnavailable", "the server is currently unable to handle it")
    _server_says(cluster, "GET", "", 503, "ServiceUnavailable", "the server is currently unable to handle it",
                 store=False)
    with pytest.raises(HarnessError):
        _launch(cluster, monkeypatch)
    err = capsys.readouterr().err
    assert "could not delete Job clustercheck-" in err and "(its create was not answered" in err, err
    assert "remove what is left with kubectl delete -n default job,service,secret -l clustercheck.io/run=" \
           "clustercheck-" in err, err
    assert [k[0] for k in cluster.objects] == ["jobs"]  # left: said, never silence


def test_a_job_create_that_stored_nothing_says_so(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _server_says(cluster, "POST", "/jobs", 500, "InternalError", "Internal error occurred", store=False)
    with pytest.raises(HarnessError):
        _launch(cluster, monkeypatch)
    err = capsys.readouterr().err
    assert "was not made (its create failed): nothing of it to delete" in err, err
    assert not [r for r in cluster.requests if r[0] == "DELETE"] and cluster.objects == {}


def _indexed_job(cluster: FakeCluster, indexes: int, max_failed: int) -> None:
    """Job cc as manifests.job makes it (backoffLimitPerIndex 0, maxFailedIndexes), a Running pod for each index."""
    from test_k8s_lost import running_pod

    cluster.objects[("jobs", "default", "cc")] = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cc", "namespace": "default", "uid": "j" * 16},
        "spec": {"completions": indexes, "completionMode": "Indexed", "backoffLimitPerIndex": 0,
                 "maxFailedIndexes": max_failed, "template": {"spec": {"containers": [{"name": "agent", "image": "x"}]}}},
        "status": {}}
    for i in range(indexes):
        name = running_pod(cluster, "cc", i)
        cluster.pods[f"cc-{i}-x"] = cluster.pods.pop(name)
        cluster.pods[f"cc-{i}-x"]["metadata"].update(name=f"cc-{i}-x", uid=f"{i}" * 16)


def test_a_job_failed_only_by_the_lost_agents_own_crash_excuses_nothing(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """--nodes 1: the one agent crashes (exit 1, a GPU fault may cause it); every index has then ended and one
    failed, so Kubernetes fails the Job with reason FailedIndexes: that is the crash, recorded, not a cause of it,
    and the node's silence stands (it was excused as 'the Job failed, and Kubernetes ends its pods')."""
    from clustercheck.run.k8s.launcher import JobPods

    _indexed_job(cluster, 1, 1)
    cluster.disrupt(0, "crashed")
    assert cluster.objects[("jobs", "default", "cc")]["status"]["conditions"][0]["reason"] == "FailedIndexes"
    assert JobPods(connect(cluster, monkeypatch), "cc").disrupted(0, "kw-node-0") is None


def test_a_job_failed_by_another_index_still_excuses_the_pods_it_ended(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.run.k8s.launcher import JobPods

    _indexed_job(cluster, 2, 0)
    cluster.disrupt(0, "crashed")  # more failed indexes than maxFailedIndexes: Kubernetes ends index 1's pod
    assert cluster.objects[("jobs", "default", "cc")]["status"]["conditions"][0]["reason"] == "MaxFailedIndexesExceeded"
    loss = JobPods(connect(cluster, monkeypatch), "cc").disrupted(1, "kw-node-1")
    assert loss is not None and not loss.blamed and "failed (MaxFailedIndexesExceeded" in loss.why, loss


@pytest.mark.parametrize("code, reason", [(429, "TooManyRequests"), (401, "Unauthorized"), (410, "Gone")])
def test_a_throttle_or_an_expired_token_after_the_preflight_is_the_harness_error(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int,
        reason: str) -> None:
    """The pre-flight found the server answering; then it throttles the Job's resume (429), or the token expires
    (401): not the user's input (exit 4) but the harness's error (exit 3); what was made is deleted."""
    from clustercheck.errors import UserError

    _server_says(cluster, "PATCH", "", code, reason, "Too many requests, please try again later.", store=False)
    with pytest.raises(HarnessError, match="starting Job clustercheck-.*: the Kubernetes API failed: Too many") as got:
        _launch(cluster, monkeypatch)
    assert not isinstance(got.value, UserError)
    assert cluster.objects == {}, capsys.readouterr().err


def test_a_refusal_after_the_preflight_stays_the_users(
        cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.errors import UserError

    _server_says(cluster, "PATCH", "", 422, "Invalid", "Job.batch is invalid: spec.suspend: Invalid value", store=False)
    with pytest.raises(UserError, match="is invalid"):
        _launch(cluster, monkeypatch)
    assert cluster.objects == {}


@pytest.mark.parametrize("extra, said", [
    (["--image", "img", "--results-claim", "Bad_Claim!"], "--results-claim 'Bad_Claim!': a Kubernetes name"),
    (["--image", "img\x1b[31m"], "--image 'img\\x1b[31m': one image reference without spaces or control"),
])
def test_render_refuses_a_claim_that_is_no_name_and_an_image_with_control_characters(
        tmp_path: Path, extra: list[str], said: str) -> None:
    import subprocess

    done = subprocess.run([sys.executable, "-m", "clustercheck", "k8s", "render", "cpu-smoke", "--nodes", "2", *extra],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 4 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
