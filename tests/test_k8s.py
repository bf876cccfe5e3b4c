"""Kubernetes without a cluster: the rendered manifests validated against the API's own schemas
(kubernetes-validate, 1.30, strict), and the API path of --launcher k8s, --taint and resume --k8s
through the official client against a fake API server on loopback (tests/fake_kube.py: what it answers,
and how, is said there). The agents the fake "kubelet" starts are real: `clustercheck agent` processes
with the pod's environment, running real gloo ranks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from clustercheck.exitcodes import Exit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_kube import FakeCluster, cluster_fixture, connect, kube_fixture  # noqa: E402
from joining import agent, controller, finish, free_port, project, results, token, wait_for  # noqa: E402

kubernetes_validate = pytest.importorskip("kubernetes_validate")
pytest.importorskip("kubernetes")

IMAGE = "registry.example/clustercheck:1"


def render(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "k8s", "render", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def validate(objects: list[dict[str, Any]]) -> None:
    for version in ("1.30", kubernetes_validate.latest_version()):
        for obj in objects:
            kubernetes_validate.validate(obj, version, strict=True)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o)
    return out


# -- render ------------------------------------------------------------------------------------------

def test_the_acceptance_render_validates_for_1_30_strict() -> None:
    res = render("cpu-smoke", "--nodes", "4", "--image", IMAGE)
    assert res.returncode == 0, res.stderr
    objects = docs(res.stdout)
    validate(objects)
    kinds = by_kind(objects)
    assert sorted(kinds) == ["Job", "Role", "RoleBinding", "Secret", "Service", "ServiceAccount"]
    (svc,) = kinds["Service"]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    agents, ctl = sorted(kinds["Job"], key=lambda j: j["metadata"]["name"])
    spec = agents["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    assert (spec.get("backoffLimit"), spec["backoffLimitPerIndex"], spec["maxFailedIndexes"]) == (None, 0, 4)
    assert spec["activeDeadlineSeconds"] == 43200
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"] == "clustercheck"
    (rule,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    assert rule["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (c,) = pod["containers"]
    assert c["command"] == ["clustercheck"] and c["args"] == ["agent", "--join-timeout", "600", "--local-ranks", "2"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["CLUSTERCHECK_CONTROLLER"]["value"] == "controller.clustercheck:29410"
    assert env["CLUSTERCHECK_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "clustercheck-token", "key": "token"}
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]
    assert "resources" not in c  # a CPU run asks for no GPU
    # the controller: join, its DNS name under the Service, and no more RBAC than reading the agents' pods and Job
    cpod = ctl["spec"]["template"]["spec"]
    assert (cpod["hostname"], cpod["subdomain"]) == ("controller", "clustercheck")
    assert cpod["containers"][0]["args"][:7] == ["run", "cpu-smoke", "--launcher", "join", "--nodes", "4", "--store-addr"]
    (role,) = kinds["Role"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
                             {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
                             {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]
    (secret,) = kinds["Secret"]
    assert len(secret["stringData"]["token"]) == 64
    assert docs(render("cpu-smoke", "--nodes", "4", "--image", IMAGE).stdout)[0]["stringData"] != secret["stringData"]


def test_the_gpu_render_asks_for_gpus_rdma_shared_memory_and_validates() -> None:
    res = render("gpu-smoke", "--nodes", "16", "--image", IMAGE, "--gpus-per-node", "8", "--rdma", "rdma/ib=1",
                 "--node-selector", "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3", "--namespace", "burnin",
                 "--taint", "--results-claim", "cc-results")
    assert res.returncode == 0, res.stderr
    objects = docs(res.stdout)
    validate(objects)
    kinds = by_kind(objects)
    agents = next(j for j in kinds["Job"] if j["metadata"]["name"] == "clustercheck")
    pod = agents["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "8", "rdma/ib": "1"}}
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert "--local-ranks" not in c["args"]  # one rank per GPU
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {o["metadata"].get("namespace") for o in objects if o["kind"] not in ("ClusterRole", "ClusterRoleBinding")} \
        == {"burnin"}
    (cluster_role,) = kinds["ClusterRole"]
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    ctl = next(j for j in kinds["Job"] if j["metadata"]["name"] == "clustercheck-controller")
    cpod = ctl["spec"]["template"]["spec"]
    assert "--taint" in cpod["containers"][0]["args"]
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "cc-results"}} in cpod["volumes"]


def test_a_controller_elsewhere_gets_agents_only_and_a_suite_file_travels_in_a_config_map(tmp_path: Path) -> None:
    res = render("cpu-smoke", "--nodes", "2", "--image", IMAGE, "--controller", "10.0.0.5:29410")
    assert res.returncode == 0, res.stderr
    objects = docs(res.stdout)
    validate(objects)
    assert [o["kind"] for o in objects] == ["Secret", "Service", "Job"]
    assert "ports" not in objects[1]["spec"]
    env = {e["name"]: e for e in objects[2]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CLUSTERCHECK_CONTROLLER"]["value"] == "10.0.0.5:29410"
    assert "clustercheck run cpu-smoke --launcher join --nodes 2 --store-addr 10.0.0.5:29410" in res.stdout
    project(tmp_path)
    res = render("s.yaml", "--nodes", "2", "--image", IMAGE, cwd=tmp_path)
    objects = docs(res.stdout)
    validate(objects)
    (cm,) = by_kind(objects)["ConfigMap"]
    assert cm["data"]["suite.yaml"] == (tmp_path / "s.yaml").read_text()
    ctl = next(o for o in objects if o["metadata"]["name"] == "clustercheck-controller" and o["kind"] == "Job")
    assert ctl["spec"]["template"]["spec"]["containers"][0]["args"][1] == "/suite/suite.yaml"


def test_strict_validation_can_fail() -> None:
    """The validator is no rubber stamp: an unknown field, or a field of the wrong type, is refused."""
    objects = docs(render("cpu-smoke", "--nodes", "2", "--image", IMAGE).stdout)
    job = next(o for o in objects if o["kind"] == "Job")
    job["spec"]["completionMod"] = "Indexed"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.30", strict=True)
    del job["spec"]["completionMod"]
    job["spec"]["backoffLimit"] = "none"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.30", strict=True)


@pytest.mark.parametrize("args, said", [
    (["--nodes", "0"], "--nodes must be between 1 and 100000, got 0"),
    (["--nodes", "200000"], "--nodes must be between 1 and 100000, got 200000"),  # an Indexed Job's completions
    (["--nodes", "2", "--node-selector", "gpu"], "--node-selector 'gpu': expected KEY=VALUE"),
    (["--nodes", "2", "--node-selector", "k=" + "v" * 64], "--node-selector 'k=vvv"),
    (["--nodes", "2", "--rdma", "rdma/ib=0"], "--rdma 'rdma/ib=0'"),
    (["--nodes", "2", "--name", "Clustercheck"], "--name 'Clustercheck'"),
    (["--nodes", "2", "--namespace", "a_b"], "--namespace 'a_b'"),
    (["--nodes", "2", "--controller", "ctl"], "--controller 'ctl': expected HOST:PORT"),
    (["--nodes", "2", "--controller", "10.0.0.5:29410", "--taint"], "--taint and --results-claim are for --controller in-cluster"),
    (["--nodes", "2", "--gpus-per-node", "8", "--local-ranks", "2"], "--local-ranks K (1-1024) is for CPU nodes"),
    (["--nodes", "2", "--shm", "lots"], "--shm 'lots'"),
])
def test_bad_render_input_is_one_line_exit_4(args: list[str], said: str) -> None:
    res = render("cpu-smoke", "--image", IMAGE, *args)
    assert res.returncode == Exit.BAD_INPUT and res.stdout == "", res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert said in line, line


@pytest.mark.parametrize("suite, said", [
    ("cpu-smoke\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: evil", "without control characters"),
    ("no-such-suite", "no suite named 'no-such-suite'"),
    ("$(touch pwned).yaml", "no such suite file"),
])
def test_a_suite_for_a_controller_elsewhere_is_one_plain_line_that_run_finds(suite: str, said: str) -> None:
    """--controller HOST:PORT writes SUITE into the YAML's comment and the shell line it suggests: a newline
    injected YAML documents (a Namespace, rc 0), `$(...)` ran where the line was pasted, and a suite that
    does not exist rendered rc 0; each is now one line, exit 4, and nothing on stdout."""
    res = render(suite, "--nodes", "2", "--image", IMAGE, "--controller", "10.0.0.5:29410")
    assert res.returncode == Exit.BAD_INPUT and res.stdout == "", res.stdout
    (line,) = res.stderr.strip().splitlines()
    assert said in line, line


def test_the_suggested_run_line_quotes_the_suite(tmp_path: Path) -> None:
    (tmp_path / "my suite.yaml").write_text((project(tmp_path) / "s.yaml").read_text())
    res = render("my suite.yaml", "--nodes", "2", "--image", IMAGE, "--controller", "10.0.0.5:29410", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "clustercheck run 'my suite.yaml' --launcher join" in res.stdout, res.stdout[:600]


def test_a_bad_suite_file_is_refused_at_render_naming_file_line_and_key(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("checks:\n  - id: x\n    measure: all_reduce\n    scope: galaxy\n")
    res = render("bad.yaml", "--nodes", "2", "--image", IMAGE, cwd=tmp_path)
    assert res.returncode == Exit.BAD_INPUT and "bad.yaml:4" in res.stderr and "scope" in res.stderr, res.stderr
    res = render("no-such-suite", "--nodes", "2", "--image", IMAGE)
    assert res.returncode == Exit.BAD_INPUT and "no suite file or shipped suite named 'no-such-suite'" in res.stderr


# -- the API path --------------------------------------------------------------------------------------

def own_address() -> str:
    """An address of this machine other than loopback (the agents reach the controller there, as pods
    would reach it on the cluster network); the test is skipped on a machine that has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent by a UDP connect
            addr = str(s.getsockname()[0])
        except OSError:
            addr = "127.0.0.1"
    if addr.startswith("127."):
        pytest.skip("this machine has no address besides loopback")
    return addr


cluster = cluster_fixture("kw-node-0", "kw-node-1", "kw-node-2", "pod0", "pod1")


def k8s_run(tmp: Path, c: FakeCluster, *args: str, nodes: int = 3, timeout: str = "15") -> subprocess.Popen[str]:
    project(tmp)
    return controller(tmp, token(), ["s.yaml", "--thresholds", "th", "--launcher", "k8s", "--nodes", str(nodes),
                                     "--image", IMAGE, "--join-timeout", timeout, "--ranks", "2", *args],
                      env={"KUBECONFIG": str(c.kubeconfig)})


def writes(c: FakeCluster) -> list[tuple[str, str, str]]:
    return [r for r in c.requests if r[0] in ("POST", "DELETE", "PATCH") and "selfsubjectaccessreviews" not in r[1]]


@pytest.mark.pool
def test_the_k8s_launcher_creates_runs_reports_an_unschedulable_pod_and_deletes_what_it_made(
        cluster: FakeCluster, tmp_path: Path) -> None:
    cluster.fates = {2: "unschedulable"}
    cluster.lacks = {("list", "events")}  # asked for, not required: the run goes on without it
    port = free_port()
    # the unschedulable pod is waited for the whole --join-timeout (a node may yet be added for it); the two others
    # join a second or so into it, their agents some 3 s after they start waiting for this controller (load 3-6)
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{port}", "-k", "not node-late", timeout="10")
    out = finish(ctl, [])
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["verdict"] == "INCOMPLETE", out[-4000:]
    assert {r["node"] for r in data["results"] if r["scope"] == "node"} == {"kw-node-0", "kw-node-1"}
    assert {r["outcome"] for r in data["results"]} == {"passed"}, out[-4000:]
    ((pod, why),) = data["run"]["absent"].items()
    assert data["untested"] == [pod] and pod.startswith("clustercheck-") and pod.split("-")[2] == "2"
    assert why.endswith("never started its agent: Unschedulable: 0/3 nodes are available: 3 Insufficient "
                        "nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for "
                        "incoming pod."), why
    # pre-flight first (every verb, then each object as a dry run), then the Job made suspended, the Secret and
    # Service it owns, the Job resumed, then their deletion
    posts = writes(cluster)
    job = posts[6][1].rsplit("/", 1)[-1]
    assert [(m, p.rsplit("/", 1)[-1], q) for m, p, q in posts] == [
        ("POST", "secrets", "dryRun=All"), ("POST", "services", "dryRun=All"), ("POST", "jobs", "dryRun=All"),
        ("POST", "jobs", ""), ("POST", "secrets", ""), ("POST", "services", ""), ("PATCH", job, ""),
        ("DELETE", job, ""), ("DELETE", posts[8][1].rsplit("/", 1)[-1], ""),
        ("DELETE", posts[9][1].rsplit("/", 1)[-1], "")], posts
    assert [p.split("/")[-2] for _, p, _ in posts[6:]] == ["jobs", "jobs", "services", "secrets"]
    assert cluster.requests.index(next(r for r in cluster.requests if "selfsubjectaccessreviews" in r[1])) < \
        cluster.requests.index(posts[0])
    assert cluster.objects == {} and cluster.pods == {}
    for p in cluster.started:
        p.wait(30)
    said = [f.read_text() for f in sorted(tmp_path.glob("clustercheck-*.log"))]
    assert len(said) == 2 and all("the run is over: leaving" in s for s in said), said  # left on goodbye
    assert "deleted Job, Service and Secret clustercheck-" in out


@pytest.mark.pool
def test_sigterm_mid_run_deletes_what_the_run_made_and_says_incomplete(cluster: FakeCluster, tmp_path: Path) -> None:
    port = free_port()
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{port}", "--cc-inject-fault=node-ar:delay")
    wait_for(tmp_path / "out" / "latest" / "run.jsonl", '"type": "result"', 240)
    assert len(cluster.objects) == 3
    # a controller killed outright (SIGKILL) deletes nothing: the Secret and Service go with the Job, by
    # Kubernetes' garbage collector (ownerReferences), once its ttlSecondsAfterFinished removes it
    ((job,),) = [[o for k, o in cluster.objects.items() if k[0] == "jobs"]]
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"], "uid": job["metadata"]["uid"]}]
    assert [o["metadata"].get("ownerReferences") for k, o in sorted(cluster.objects.items()) if k[0] != "jobs"] == \
        [owner, owner]
    assert job["spec"].get("suspend") is False  # made suspended, resumed once what it owns was there
    ctl.send_signal(signal.SIGTERM)
    out = finish(ctl, [])
    data = results(tmp_path)
    assert ctl.returncode == Exit.INCOMPLETE and data["incomplete"]["reason"] == "interrupted (SIGTERM)", out[-3000:]
    assert cluster.objects == {} and cluster.pods == {}
    for p in cluster.started:
        p.wait(30)


def test_sigterm_while_the_agents_are_awaited_deletes_what_was_made(cluster: FakeCluster, tmp_path: Path) -> None:
    """Before the run starts (pytest's own handlers are not yet installed) a SIGTERM still ends the wait
    and deletes the objects, the Job too when the signal comes while the API has made it but not yet
    answered (the Job was left behind that way, with a message saying it was deleted)."""
    cluster.fates = {0: "image-pull", 1: "image-pull", 2: "image-pull"}
    cluster.answer_after = {"jobs": 3.0}
    ctl = k8s_run(tmp_path, cluster, "--store-addr", f"{own_address()}:{free_port()}", timeout="120")
    end = time.monotonic() + 60
    while len(cluster.objects) < 3 and time.monotonic() < end:
        time.sleep(0.1)
    assert len(cluster.objects) == 3
    ctl.send_signal(signal.SIGTERM)
    out = finish(ctl, [], timeout=60)
    assert cluster.objects == {} and "deleted Job, Service and Secret" in out, out[-3000:]
    assert ctl.returncode == Exit.INCOMPLETE, out[-3000:]


def test_the_pods_are_made_while_the_controller_starts_its_store(cluster: FakeCluster,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller listens, makes the objects and resumes the Job (its pods start, and import torch), and only
    then serves its store (imports torch itself): the two imports overlap, where the pods were made once the
    store was up, seconds later. An agent that connects sooner waits in the listening socket's backlog."""
    from clustercheck.run.join import JoinLauncher
    from clustercheck.run.k8s.launcher import K8sLauncher

    kube = connect(cluster, monkeypatch)
    seen: list[tuple[list[str], int, bool]] = []
    monkeypatch.setattr(JoinLauncher, "serve_store", lambda self: seen.append(
        (sorted(k[0] for k in cluster.objects), len(cluster.pods), self._listener is not None)))
    monkeypatch.setattr(JoinLauncher, "gather", lambda self, every=5.0: None)
    cluster.fates = {0: "image-pull"}
    launcher = K8sLauncher(1, f"{own_address()}:{free_port()}", 5, image=IMAGE, kube=kube)
    launcher.close()
    assert seen == [(["jobs", "secrets", "services"], 1, True)], seen  # made, its pod started, the port listening
    assert cluster.objects == {}


@pytest.mark.parametrize("setup, args, said", [
    ("no-kubeconfig", [], "no Kubernetes credentials: no kubeconfig at $KUBECONFIG=/nonexistent/kubeconfig, and not "
                          "inside a pod"),
    ("", ["--namespace", "nope"], "namespace 'nope' not found"),
    ("lacks-delete-jobs", [], "forbidden (kubeconfig "),
    ("lacks-list-pods", [], "this identity may not list pods in namespace default"),
    ("unreachable", [], "cannot reach the Kubernetes API at http://127.0.0.1:"),
    ("", ["--store-addr", "127.0.0.1:29410"], "127.0.0.1 is not an address they can reach"),
])
def test_what_the_cluster_lacks_is_one_line_exit_4_before_anything_is_made(
        cluster: FakeCluster, tmp_path: Path, setup: str, args: list[str], said: str) -> None:
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    if setup == "no-kubeconfig":
        env["KUBECONFIG"] = "/nonexistent/kubeconfig"
    elif setup.startswith("lacks-"):
        verb, _, resource = setup.removeprefix("lacks-").partition("-")
        cluster.lacks = {(verb, resource)}
    elif setup == "unreachable":
        closed = free_port()
        cfg = json.loads(cluster.kubeconfig.read_text())
        cfg["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{closed}"
        (tmp_path / "dead").write_text(json.dumps(cfg))
        env["KUBECONFIG"] = str(tmp_path / "dead")
    project(tmp_path)
    address = [] if "--store-addr" in args else ["--store-addr", "192.0.2.77:29410"]
    ctl = controller(tmp_path, token(), ["s.yaml", "--thresholds", "th", "--launcher", "k8s", "--nodes", "2",
                                         "--image", IMAGE, *address, *args], env=env)
    out = finish(ctl, [], timeout=120)
    assert ctl.returncode == Exit.BAD_INPUT and said in out, out[-3000:]
    assert "Traceback" not in out
    assert [r for r in writes(cluster) if r[2] != "dryRun=All"] == [] and cluster.objects == {}
    if setup == "lacks-delete-jobs":
        assert "this identity may not delete jobs.batch in namespace default" in out


def test_only_the_object_a_run_made_is_deleted(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deletion carries the uid the create returned: an object of the same name that someone else made in
    between is left alone, and the refusal is said."""
    from clustercheck.run.k8s import api

    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kube = api.connect()
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cc-x"}, "spec": {"clusterIP": "None"}}
    made = kube.create(svc)
    assert made.uid == cluster.objects[("services", "default", "cc-x")]["metadata"]["uid"]
    del cluster.objects[("services", "default", "cc-x")]
    theirs = kube.create(svc)  # someone else's, same name
    why = kube.delete(made)
    assert "Precondition failed: UID in precondition: " + made.uid in why
    assert cluster.objects[("services", "default", "cc-x")]["metadata"]["uid"] == theirs.uid
    assert kube.delete(theirs) == "" and cluster.objects == {}
    assert kube.delete(theirs) == ""  # already gone: nothing to say


# -- taints ----------------------------------------------------------------------------------------------

kube = kube_fixture()


def test_taint_marks_the_node_keeps_other_taints_and_the_dry_run_changes_nothing(cluster: FakeCluster, kube: Any) -> None:
    from clustercheck.run.k8s.taint import taint

    theirs = {"key": "example.com/maintenance", "value": "yes", "effect": "NoExecute"}
    cluster.nodes["kw-node-1"]["spec"]["taints"] = [theirs]
    why = "node-ar busbw 0.01 < 1 GB/s"
    planned = taint({"kw-node-1": why}, "20261126-000000-cpu", dry_run=True)
    assert [e["command"][:3] for e in planned] == [["kubectl", "taint", "nodes"], ["kubectl", "label", "nodes"],
                                                   ["kubectl", "annotate", "nodes"]]
    assert planned[0]["command"][3:] == ["kw-node-1", "clustercheck.io/failed=node-ar:NoSchedule", "--overwrite"]
    assert {e["rc"] for e in planned} == {None} and cluster.nodes["kw-node-1"]["spec"]["taints"] == [theirs]
    done = taint({"kw-node-1": why}, "20261126-000000-cpu", dry_run=False, kube=kube)
    assert {e["rc"] for e in done} == {0}
    node = cluster.nodes["kw-node-1"]
    assert node["spec"]["taints"] == [theirs, {"key": "clustercheck.io/failed", "value": "node-ar", "effect": "NoSchedule"}]
    assert node["metadata"]["labels"]["clustercheck.io/failed"] == "node-ar"
    assert node["metadata"]["annotations"] == {"clustercheck.io/reason": why, "clustercheck.io/run": "20261126-000000-cpu"}
    failed = taint({"no-such-node": why}, "r", dry_run=False, kube=kube)
    assert failed[0]["rc"] == 1 and 'nodes "no-such-node" not found' in failed[0]["output"]


def test_resume_k8s_untaints_only_what_clustercheck_tainted(cluster: FakeCluster, kube: Any, tmp_path: Path) -> None:
    from clustercheck.run.k8s.taint import taint

    taint({"kw-node-0": "node-ar busbw 0 < 1 GB/s"}, "run-a", dry_run=False, kube=kube)
    other = {"key": "example.com/maintenance", "value": "yes", "effect": "NoSchedule"}
    cluster.nodes["kw-node-0"]["spec"]["taints"].insert(0, other)
    cluster.nodes["kw-node-1"]["spec"]["taints"] = [{"key": "clustercheck.io/failed", "value": "x", "effect": "NoSchedule"}]
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    dry = subprocess.run([sys.executable, "-m", "clustercheck", "resume", "--k8s", "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "would run: kubectl taint nodes kw-node-0 clustercheck.io/failed:NoSchedule-" in dry.stdout
    assert "left alone kw-node-1: tainted clustercheck.io/failed without the clustercheck.io/run annotation" in dry.stdout
    assert len(cluster.nodes["kw-node-0"]["spec"]["taints"]) == 2  # a dry run changes nothing
    res = subprocess.run([sys.executable, "-m", "clustercheck", "resume", "--k8s"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "untainted kw-node-0 (tainted by run run-a)" in res.stdout, res.stdout + res.stderr
    node = cluster.nodes["kw-node-0"]
    assert node["spec"]["taints"] == [other] and "clustercheck.io/failed" not in node["metadata"]["labels"]
    assert node["metadata"]["annotations"] == {}
    assert cluster.nodes["kw-node-1"]["spec"]["taints"][0]["key"] == "clustercheck.io/failed"  # not ours: kept
    again = subprocess.run([sys.executable, "-m", "clustercheck", "resume", "--k8s", "kw-node-0"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "no node is tainted by clustercheck" in again.stdout


def test_taint_leaves_alone_a_node_someone_else_tainted_with_our_key(cluster: FakeCluster, kube: Any) -> None:
    """A clustercheck.io/failed taint without clustercheck's run annotation is someone else's: --taint neither
    takes it over (which would let resume --k8s lift it) nor changes anything of the node."""
    from clustercheck.run.k8s.taint import taint

    theirs = {"key": "clustercheck.io/failed", "value": "hw-ticket-123", "effect": "NoSchedule"}
    cluster.nodes["kw-node-1"]["spec"]["taints"] = [theirs]
    before = json.loads(json.dumps(cluster.nodes["kw-node-1"]))
    out = taint({"kw-node-1": "node-ar busbw 0 < 1 GB/s"}, "run-x", dry_run=False, kube=kube)
    assert len(out) == 1 and out[0]["rc"] is None, out
    assert out[0]["output"].startswith("left alone: already tainted clustercheck.io/failed=hw-ticket-123:NoSchedule "
                                       "by someone else"), out
    assert cluster.nodes["kw-node-1"] == before
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    res = subprocess.run([sys.executable, "-m", "clustercheck", "resume", "--k8s"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0 and "left alone kw-node-1" in res.stdout, res.stdout + res.stderr
    assert cluster.nodes["kw-node-1"]["spec"]["taints"] == [theirs]


def test_taint_without_credentials_or_rbac_is_refused_before_measuring(tmp_path: Path) -> None:
    """--taint measured everything and only then said `taint failed (no Kubernetes credentials ...)`."""
    project(tmp_path)
    c = FakeCluster(tmp_path, nodes=("kw-node-0",), lacks={("patch", "nodes")})
    try:
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "nonexistent")}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        args = [sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out", "--taint"]
        none = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert none.returncode == Exit.BAD_INPUT and "Traceback" not in none.stderr, none.stdout + none.stderr
        assert none.stderr.strip().splitlines() == [f"ERROR: --taint: no Kubernetes credentials: no kubeconfig at "
                                                    f"$KUBECONFIG={tmp_path / 'nonexistent'}, and not inside a pod"]
        env["KUBECONFIG"] = str(c.kubeconfig)
        denied = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert denied.returncode == Exit.BAD_INPUT, denied.stdout + denied.stderr
        lines = denied.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ERROR: --taint: forbidden (kubeconfig ") \
            and "may not patch nodes" in lines[0], denied.stderr
        assert not (tmp_path / "out").exists()  # nothing was measured
    finally:
        c.close()


@pytest.mark.pool
def test_a_run_with_taint_taints_the_node_that_failed_and_only_it(cluster: FakeCluster, tmp_path: Path) -> None:
    """--launcher join, nodes named as Kubernetes names them: rank 3 (pod1) corrupts its result (a
    test-only fault), pod1 fails node-ar, and --taint taints pod1 through the API; pod0 stays untouched."""
    project(tmp_path)
    port, secret = free_port(), token()
    ctl = controller(tmp_path, secret, ["s.yaml", "--thresholds", "th", "--launcher", "join", "--nodes", "2",
                                        "--store-addr", f"127.0.0.1:{port}", "-k", "node-ar", "--taint",
                                        "--cc-inject-fault=node-ar:corrupt@3"],
                     env={"KUBECONFIG": str(cluster.kubeconfig)})
    agents = [agent(tmp_path, secret, i, f"pod{i}", f"127.0.0.1:{port}", "--local-ranks", "2") for i in (0, 1)]
    out = finish(ctl, agents)
    assert ctl.returncode == Exit.FAILED, out[-3000:]
    assert "taint done: kubectl taint nodes pod1 clustercheck.io/failed=node-ar:NoSchedule --overwrite" in out
    assert cluster.nodes["pod1"]["spec"]["taints"] == [{"key": "clustercheck.io/failed", "value": "node-ar",
                                                         "effect": "NoSchedule"}]
    run_id = (tmp_path / "out" / "latest").resolve().name
    assert cluster.nodes["pod1"]["metadata"]["annotations"]["clustercheck.io/run"] == run_id
    assert cluster.nodes["pod0"]["spec"]["taints"] == [] and cluster.nodes["pod0"]["metadata"]["annotations"] == {}


@pytest.mark.pool
def test_the_rendered_controller_runs_its_agents_and_names_a_pod_that_never_started(
        cluster: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `k8s render` prints, applied to the fake API: its Secret, Service and agents' Job (index 1's
    image cannot be pulled), and its controller's own arguments (`--launcher join ... --k8s-job NAME`)
    run here with the rendered secret: index 0 is measured, index 1 is named by its node with the pod's
    reason, read through the API as the controller's Role allows."""
    from clustercheck.run.k8s import api

    project(tmp_path)
    port = free_port()
    # index 1's pod is waited for the whole --join-timeout (its image may yet be pulled); index 0's agent waits some
    # 3 s for this controller to start (load 3-6), which it joins at once
    objects = docs(render("s.yaml", "--nodes", "2", "--image", IMAGE, "--local-ranks", "2", "--join-timeout", "10",
                          cwd=tmp_path).stdout)
    agents_job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "clustercheck")
    for e in agents_job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if e["name"] == "CLUSTERCHECK_CONTROLLER":
            e["value"] = f"127.0.0.1:{port}"  # the controller pod's DNS name, on this machine
    cluster.fates = {1: "image-pull"}
    with monkeypatch.context() as m:
        m.setenv("KUBECONFIG", str(cluster.kubeconfig))
        m.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        kube = api.connect()
        for obj in objects[:2] + [agents_job]:
            kube.create(obj)
    ctl_job = next(o for o in objects if o["kind"] == "Job" and o["metadata"]["name"] == "clustercheck-controller")
    args = ctl_job["spec"]["template"]["spec"]["containers"][0]["args"][1:]
    args[args.index("--store-addr") + 1] = f"127.0.0.1:{port}"
    args = [a for i, a in enumerate(args) if a != "--out" and (i == 0 or args[i - 1] != "--out")]
    args[0] = "s.yaml"
    secret = objects[0]["stringData"]["token"]
    ctl = controller(tmp_path, secret, [*args, "--thresholds", "th", "-k", "not node-late"],
                     env={"KUBECONFIG": str(cluster.kubeconfig)})
    out = finish(ctl, [])
    data = results(tmp_path)
    assert data["verdict"] == "INCOMPLETE" and ctl.returncode == Exit.INCOMPLETE, out[-4000:]
    assert {r["node"] for r in data["results"] if r["scope"] == "node"} == {"kw-node-0"}
    assert data["untested"] == ["kw-node-1"]
    why = data["run"]["absent"]["kw-node-1"]
    assert why.startswith("pod clustercheck-1-") and why.endswith(f'never started its agent: ImagePullBackOff: Back-off '
                                                                  f'pulling image "{IMAGE}"'), why
