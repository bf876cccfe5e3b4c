"""A stand-in for a Kubernetes API server, on loopback HTTP, for the calls clustercheck makes; the official
client reaches it through a kubeconfig as it would a cluster. No cluster runs on these machines, so this
is the boundary the tests fake, and only it: the client, its kubeconfig loading, urllib3 and JSON are
the real ones.

Shapes follow the API reference (kubernetes.io/docs/reference/kubernetes-api, and "API Concepts"):
objects carry metadata.uid, resourceVersion and creationTimestamp; lists are {kind: <Kind>List,
apiVersion, metadata: {resourceVersion}, items}; every refusal is a Status object {kind: Status,
apiVersion: v1, metadata: {}, status: Failure, message, reason, details, code} with the HTTP code;
`dryRun=All` admits and validates without storing; DeleteOptions.preconditions.uid is enforced (409
Conflict); RBAC is a set of (verb, resource) pairs this identity lacks, answered by
SelfSubjectAccessReview and enforced on every request (403 Forbidden); a create in a namespace that
does not exist is 404 `namespaces "x" not found`.

A Job (completionMode Indexed) is played by a toy job controller, scheduler and kubelet: one pod per
index, named <job>-<index>-<suffix>, with the Job controller's labels and the
batch.kubernetes.io/job-completion-index annotation, and JOB_COMPLETION_INDEX in its environment. What
becomes of each index is the test's choice (`fates`): "run" starts the pod's container command as a
local process (`clustercheck ...` run by this Python) with the container's env resolved (value,
fieldRef spec.nodeName, secretKeyRef), "unschedulable" leaves it Pending with PodScheduled=False
(reason Unschedulable), "image-pull" leaves it Pending on its node with the container waiting in
ImagePullBackOff, "failed" ends it (phase Failed, container terminated, exit code 1), "forbidden" makes no
pod at all: admission refused it (a ResourceQuota), and the Job controller records a Warning Event on the Job,
reason FailedCreate, quoting the refusal (core/v1 Events, listed with a fieldSelector on involvedObject.kind,
name, uid and reason); `disrupt` ends a running pod as Kubernetes would mid-run
(evicted, preempted, OOM-killed, deleted, its node NotReady). The toy Job controller counts failed pods as
the Job's spec says (backoffLimit, or backoffLimitPerIndex with maxFailedIndexes; with backoffLimitPerIndex,
once every index has ended and one failed, the Job fails with reason FailedIndexes) and, once the Job fails,
terminates every other pod of it (deletionTimestamp, SIGTERM), as Kubernetes does. Deleting the Job
(propagationPolicy Background) terminates its processes with SIGTERM and removes its pods.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import parse_qs, urlparse

import pytest

_RV = itertools.count(1000)
PLURAL = {"Secret": "secrets", "Service": "services", "Job": "jobs"}
KIND = {v: k for k, v in PLURAL.items()}


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _field(obj: dict[str, Any], path: str) -> str:
    """An object's field by its dotted fieldSelector path (involvedObject.name), "" when absent."""
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None  # type: ignore[assignment]
    return "" if obj is None else str(obj)


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details, "code": code}


class FakeCluster:
    def __init__(self, tmp: Path, *, namespaces: tuple[str, ...] = ("default",), lacks: set[tuple[str, str]] = frozenset(),
                 nodes: tuple[str, ...] = (), fates: dict[int, str] | None = None, agent_env: dict[str, str] | None = None,
                 logs: Path | None = None) -> None:
        self.namespaces = set(namespaces)
        self.lacks = set(lacks)  # (verb, resource) this identity may not do
        self.fates = fates or {}
        self.answer_after: dict[str, float] = {}  # plural -> seconds a create waits, once made, before answering
        self.agent_env = agent_env or {}
        self.logs = logs or tmp
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name)
        self.pods: dict[str, dict[str, Any]] = {}  # name -> pod
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # pod name -> its "container"
        self.started: list[subprocess.Popen[bytes]] = []  # every container ever started, for close()
        self.nodes = {n: {"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": n, "uid": secrets.token_hex(8), "resourceVersion": str(next(_RV)),
                                       "creationTimestamp": _now(), "labels": {"kubernetes.io/hostname": n},
                                       "annotations": {}},
                          "spec": {"taints": []}, "status": {}} for n in nodes}
        self.requests: list[tuple[str, str, str]] = []  # (method, path, query)
        self.events: list[dict[str, Any]] = []  # core/v1 Events (the toy Job controller's FailedCreate)
        self.jobs_failed: list[str] = []  # Jobs the toy Job controller failed (and ended every pod of)
        self.counted: set[str] = set()
        self.fail: set[tuple[str, str, bool]] = set()  # (method, plural, dry run) answered 500 InternalError
        self.written_after_read: dict[str, int] = {}  # node -> times someone else writes it right after a read
        self.hang: set[str] = set()  # HTTP methods this server never answers (it reads them, and waits)
        self.hung: list[tuple[str, str]] = []  # (method, path) of each request left unanswered
        self.release = threading.Event()  # uids of the pods the toy Job controller counted as failed
        self.lock = threading.RLock()
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> Any:
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"null")

            def _answer(self) -> None:
                url = urlparse(self.path)
                if self.command in cluster.hang:  # a server that never answers (until the test ends)
                    cluster.hung.append((self.command, url.path))
                    cluster.release.wait(600)
                    return
                with cluster.lock:
                    cluster.requests.append((self.command, url.path, url.query))
                    code, body = cluster.handle(self.command, url.path, parse_qs(url.query),
                                                self._body() if self.command in ("POST", "PATCH", "DELETE") else None)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.kubeconfig = tmp / "kubeconfig"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": "default"}}]}))

    # -- the API --------------------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, Any]:
        dry = query.get("dryRun") == ["All"]
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            attrs = body["spec"]["resourceAttributes"]
            allowed = (attrs["verb"], attrs["resource"]) not in self.lacks
            return 201, {**body, "metadata": {"creationTimestamp": None}, "status": {"allowed": allowed}}
        if m := re.fullmatch(r"/api/v1/nodes(?:/([^/]+))?", path):
            return self._nodes(method, m.group(1), body)
        m = re.fullmatch(r"/(?:api/v1|apis/batch/v1)/namespaces/([^/]+)/(secrets|services|jobs|pods|events)(?:/([^/]+))?", path)
        if not m:
            return 404, status(404, "NotFound", "the server could not find the requested resource")
        ns, plural, name = m.groups()
        verb = {"POST": "create", "DELETE": "delete", "PATCH": "patch"}.get(method, "get" if name else "list")
        if (verb, plural) in self.lacks:
            group = ' in API group "batch"' if plural == "jobs" else ' in API group ""'
            return 403, status(403, "Forbidden", f'{plural}{".batch" if plural == "jobs" else ""} is forbidden: User '
                                                 f'"tester" cannot {verb} resource "{plural}"{group} in the namespace "{ns}"',
                               kind=plural)
        if ns not in self.namespaces:
            if method == "GET" and not name:
                return 200, self._list(plural, [])
            return 404, status(404, "NotFound", f'namespaces "{ns}" not found', name=ns, kind="namespaces")
        if (method, plural, dry) in self.fail:  # the server's own failure (an etcd timeout, say)
            return 500, status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        if plural == "pods":
            selector = dict(kv.split("=", 1) for kv in (query.get("labelSelector") or [""])[0].split(",") if "=" in kv)
            with self.lock:
                self._refresh_pods()
                items = [copy.deepcopy(p) for p in self.pods.values() if p["metadata"]["namespace"] == ns and
                         all(p["metadata"]["labels"].get(k) == v for k, v in selector.items())]
            return 200, self._list("pods", items)
        if plural == "events":  # a fieldSelector of key=value terms, as the API server's field selectors on Events
            wanted = dict(kv.split("=", 1) for kv in (query.get("fieldSelector") or [""])[0].split(",") if "=" in kv)
            with self.lock:
                items = [copy.deepcopy(e) for e in self.events if e["metadata"]["namespace"] == ns and
                         all(_field(e, k) == v for k, v in wanted.items())]
            return 200, self._list("events", items)
        key = (plural, ns, name or (body or {}).get("metadata", {}).get("name", ""))
        if method == "POST":
            if key in self.objects:
                return 409, status(409, "AlreadyExists", f'{plural} "{key[2]}" already exists', name=key[2], kind=plural)
            obj = copy.deepcopy(body)
            obj["metadata"].update(uid=secrets.token_hex(16), resourceVersion=str(next(_RV)), creationTimestamp=_now(),
                                   namespace=ns)
            if not dry:
                self.objects[key] = obj
                if plural == "jobs" and not obj["spec"].get("suspend"):
                    self._start_job(obj)
                time.sleep(self.answer_after.get(plural, 0.0))  # made, and the client still waits for the answer
            return 201, obj
        if method == "DELETE":
            obj = self.objects.get(key)
            if obj is None:
                return 404, status(404, "NotFound", f'{plural} "{key[2]}" not found', name=key[2], kind=plural)
            want = ((body or {}).get("preconditions") or {}).get("uid")
            if want and want != obj["metadata"]["uid"]:
                return 409, status(409, "Conflict", f"Operation cannot be fulfilled on {plural} \"{key[2]}\": Precondition "
                                                    f"failed: UID in precondition: {want}, UID in object meta: "
                                                    f"{obj['metadata']['uid']}", name=key[2], kind=plural)
            if not dry:
                del self.objects[key]
                if plural == "jobs":
                    self._stop_job(key[2])
            if plural == "services":  # the reference: DELETE of a Service answers with the Service
                return 200, obj
            return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                         "details": {"name": key[2], "kind": plural, "uid": obj["metadata"]["uid"]}}
        obj = self.objects.get(key)
        if obj and method == "PATCH" and plural == "jobs":  # resuming a suspended Job starts its pods
            suspended = obj["spec"].get("suspend", False)
            obj["spec"].update((body or {}).get("spec", {}))
            if suspended and not obj["spec"].get("suspend"):
                self._start_job(obj)
        return (200, obj) if obj else (404, status(404, "NotFound", f'{plural} "{key[2]}" not found'))

    def _list(self, plural: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        kind = {"pods": "PodList", "nodes": "NodeList", "events": "EventList"}.get(plural, "List")
        return {"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(next(_RV))}, "items": items}

    def _nodes(self, method: str, name: str | None, body: Any) -> tuple[int, Any]:
        verb = {"PATCH": "patch"}.get(method, "get" if name else "list")
        if (verb, "nodes") in self.lacks:
            return 403, status(403, "Forbidden", f'nodes is forbidden: User "tester" cannot {verb} resource "nodes"',
                               kind="nodes")
        if name is None:
            listed = self._list("nodes", [copy.deepcopy(n) for n in self.nodes.values()])
            for n, times in self.written_after_read.items():
                if times > 0:
                    self.written_after_read[n] -= 1
                    self.nodes[n]["metadata"]["resourceVersion"] = str(next(_RV))
            return 200, listed
        node = self.nodes.get(name)
        if node is None:
            return 404, status(404, "NotFound", f'nodes "{name}" not found', name=name, kind="nodes")
        if method == "PATCH":  # a merge patch: maps merged (null deletes), lists replaced
            meta = body.get("metadata") or {}
            rv = meta.get("resourceVersion")
            if rv and rv != node["metadata"]["resourceVersion"]:
                return 409, status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                                                    "been modified; please apply your changes to the latest version "
                                                    "and try again", name=name, kind="nodes")
            for part in ("labels", "annotations"):
                for k, v in (meta.get(part) or {}).items():
                    if v is None:
                        node["metadata"][part].pop(k, None)
                    else:
                        node["metadata"][part][k] = v
            if "taints" in (body.get("spec") or {}):
                node["spec"]["taints"] = body["spec"]["taints"]
            node["metadata"]["resourceVersion"] = str(next(_RV))
        answer = copy.deepcopy(node)
        if method == "GET" and self.written_after_read.get(name, 0) > 0:  # the kubelet, say, writes it meanwhile
            self.written_after_read[name] -= 1
            node["metadata"]["resourceVersion"] = str(next(_RV))
        return 200, answer

    # -- the toy job controller, scheduler and kubelet --------------------------------------------------
    def _start_job(self, job: dict[str, Any]) -> None:
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        template = job["spec"]["template"]
        for i in range(job["spec"]["completions"]):
            fate = self.fates.get(i, "run")
            pod_name = f"{name}-{i}-{secrets.token_hex(3)[:5]}"
            if fate == "forbidden":  # refused by admission: no pod, a Warning Event on the Job (kube-controller-manager)
                self.event(job, "FailedCreate", f'Error creating: pods "{pod_name}" is forbidden: exceeded quota: '
                                                "compute, requested: nvidia.com/gpu=8, used: nvidia.com/gpu=0, "
                                                "limited: nvidia.com/gpu=4")
                continue
            node = f"kw-node-{i}" if fate != "unschedulable" else None
            labels = {**template["metadata"]["labels"], "job-name": name, "batch.kubernetes.io/job-name": name,
                      "batch.kubernetes.io/job-completion-index": str(i)}
            pod: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": ns, "uid": secrets.token_hex(16), "labels": labels,
                             "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
                             "resourceVersion": str(next(_RV)), "creationTimestamp": _now()},
                "spec": {**copy.deepcopy(template["spec"]), "hostname": f"{name}-{i}",
                         **({"nodeName": node} if node else {})},
                "status": {"phase": "Pending"}}
            container = template["spec"]["containers"][0]
            if fate == "unschedulable":
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
                                                           "preemption: 0/3 nodes are available: 3 No preemption "
                                                           "victims found for incoming pod.",
                                                "lastProbeTime": None, "lastTransitionTime": _now()}]
            elif fate == "image-pull":
                pod["status"]["containerStatuses"] = [{
                    "name": container["name"], "ready": False, "restartCount": 0, "image": container["image"],
                    "imageID": "", "started": False,
                    "state": {"waiting": {"reason": "ImagePullBackOff",
                                          "message": f'Back-off pulling image "{container["image"]}"'}}}]
            elif fate == "failed":
                pod["status"]["phase"] = "Failed"
                pod["status"]["containerStatuses"] = [{
                    "name": container["name"], "ready": False, "restartCount": 0, "image": container["image"],
                    "imageID": "", "started": False,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": _now(), "finishedAt": _now()}}}]
            else:
                pod["status"]["phase"] = "Running"
                self.procs[pod_name] = self._run(container, ns, i, node or "", pod_name)
                self.started.append(self.procs[pod_name])
            self.pods[pod_name] = pod

    def event(self, obj: dict[str, Any], reason: str, message: str) -> None:
        """Record a Warning Event on `obj`, as a controller's event recorder does (core/v1)."""
        meta = obj["metadata"]
        self.events.append({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{secrets.token_hex(8)}", "namespace": meta["namespace"],
                         "uid": secrets.token_hex(16), "resourceVersion": str(next(_RV)), "creationTimestamp": _now()},
            "involvedObject": {"apiVersion": obj.get("apiVersion", "v1"), "kind": obj["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message, "type": "Warning", "count": 1,
            "source": {"component": "job-controller"}, "firstTimestamp": _now(), "lastTimestamp": _now(),
            "eventTime": None, "reportingComponent": "job-controller", "reportingInstance": ""})

    def _run(self, container: dict[str, Any], ns: str, index: int, node: str, pod_name: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERCHECK_") and k != "JOB_COMPLETION_INDEX"}
        env.update(self.agent_env)
        env["JOB_COMPLETION_INDEX"] = str(index)
        env["TMPDIR"] = str(self.logs)  # a pod's /tmp is its own
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = e["value"]
            elif ref := e.get("valueFrom", {}).get("fieldRef"):
                env[e["name"]] = {"spec.nodeName": node}[ref["fieldPath"]]
            elif ref := e.get("valueFrom", {}).get("secretKeyRef"):
                secret = self.objects[("secrets", ns, ref["name"])]
                value = (secret.get("stringData") or {}).get(ref["key"])
                env[e["name"]] = value if value is not None else base64.b64decode(secret["data"][ref["key"]]).decode()
        words = [*container["command"], *container.get("args", [])]
        assert words[0] == "clustercheck", words
        with (self.logs / f"{pod_name}.log").open("wb") as out:
            return subprocess.Popen([sys.executable, "-m", "clustercheck", *words[1:]], env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _refresh_pods(self) -> None:
        for name, proc in self.procs.items():
            code = proc.poll()
            if code is not None and name in self.pods and self.pods[name]["status"]["phase"] == "Running":
                self.pods[name]["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
                self._job_controller(self.pods[name])

    # -- what Kubernetes does to a running pod mid-run (the test's choice) --------------------------------
    def pod_of(self, index: int) -> str:
        with self.lock:
            return next(n for n, p in self.pods.items()
                        if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == str(index))

    def disrupt(self, index: int, how: str) -> None:
        """End index `index`'s pod as Kubernetes would: "evicted" (the kubelet, under memory pressure: phase
        Failed, reason Evicted, DisruptionTarget TerminationByKubelet), "preempted" (the scheduler:
        DisruptionTarget PreemptionByScheduler, deletionTimestamp), "oom" (its container OOMKilled, exit 137),
        "deleted" (someone deleted it: gone once its container ended), "node-not-ready" (the taint manager:
        DisruptionTarget DeletionByTaintManager, its node NotReady), "agent-bug" (its container exited 70,
        clustercheck's own error), "crashed" (exited 1: who is to blame is not known)."""
        with self.lock:
            name = self.pod_of(index)
            pod = self.pods[name]
            proc = self.procs.get(name)
            cond = {"evicted": ("TerminationByKubelet", "The node was low on resource: memory."),
                    "preempted": ("PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher "
                                                           "priority pod"),
                    "node-not-ready": ("DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")}
            if how in cond:
                reason, message = cond[how]
                pod["status"].setdefault("conditions", []).append(
                    {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                     "lastProbeTime": None, "lastTransitionTime": _now()})
            if how == "evicted":
                pod["status"].update(phase="Failed", reason="Evicted", message="The node was low on resource: memory. "
                                     "Threshold quantity: 100Mi, available: 51200Ki.")
            elif how in ("preempted", "node-not-ready", "deleted"):
                pod["metadata"]["deletionTimestamp"] = _now()
            elif how in ("oom", "agent-bug", "crashed"):  # OOM-killed; exit 70 (clustercheck's bug); exit 1
                code, reason = {"oom": (137, "OOMKilled"), "agent-bug": (70, "Error"), "crashed": (1, "Error")}[how]
                pod["status"]["phase"] = "Failed"
                pod["status"]["containerStatuses"] = [{
                    "name": "agent", "ready": False, "restartCount": 0, "image": "x", "imageID": "", "started": False,
                    "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": _now(),
                                             "finishedAt": _now()}}}]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL if how in ("oom", "node-not-ready", "agent-bug", "crashed") else signal.SIGTERM)
            proc.wait(30)
        if how == "deleted":
            with self.lock:
                self.pods.pop(name, None)
                self.procs.pop(name, None)
        with self.lock:
            self._job_controller(pod, deleted=how == "deleted")

    def _job_controller(self, pod: dict[str, Any], deleted: bool = False) -> None:
        """A pod of a Job failed (or was deleted, which the Job controller counts as failed): with
        backoffLimitPerIndex its index fails, and the Job only once more than maxFailedIndexes did; else the Job
        fails once more than backoffLimit (default 6) pods did, and the Job controller then terminates every
        other pod of it (deletionTimestamp, SIGTERM)."""
        labels = pod["metadata"]["labels"]
        job = self.objects.get(("jobs", pod["metadata"]["namespace"], labels.get("job-name", "")))
        phase = "Failed" if deleted else pod["status"].get("phase")
        if job is None or phase not in ("Failed", "Succeeded") or pod["metadata"]["uid"] in self.counted:
            return
        self.counted.add(pod["metadata"]["uid"])
        spec, status = job["spec"], job.setdefault("status", {})
        if spec.get("backoffLimitPerIndex") is not None:
            # completedIndexes and failedIndexes, as the Job's status lists them; once every index has ended and
            # one failed, the Job fails with reason FailedIndexes (no pod is ended for it: all have ended)
            field = "failedIndexes" if phase == "Failed" else "completedIndexes"
            ended = set(filter(None, status.get(field, "").split(",")))
            ended.add(labels["batch.kubernetes.io/job-completion-index"])
            status[field] = ",".join(sorted(ended, key=int))
            failed = set(filter(None, status.get("failedIndexes", "").split(",")))
            done = failed | set(filter(None, status.get("completedIndexes", "").split(",")))
            if spec.get("maxFailedIndexes") is not None and len(failed) > spec["maxFailedIndexes"]:
                reason = "MaxFailedIndexesExceeded"
            elif failed and len(done) >= spec.get("completions", 1):
                reason = "FailedIndexes"
            else:
                return
        elif phase != "Failed":
            return
        else:
            status["failed"] = status.get("failed", 0) + 1
            if status["failed"] <= spec.get("backoffLimit", 6):
                return
            reason = "BackoffLimitExceeded"
        message = "Job has failed indexes" if reason == "FailedIndexes" else "Job has reached the specified backoff limit"
        status["conditions"] = [{"type": "Failed", "status": "True", "reason": reason, "lastProbeTime": _now(),
                                 "lastTransitionTime": _now(), "message": message}]
        self.jobs_failed.append(job["metadata"]["name"])
        for name, other in self.pods.items():
            if other["metadata"]["labels"].get("job-name") == job["metadata"]["name"] and other is not pod and \
                    other["status"].get("phase") in ("Pending", "Running"):
                other["metadata"]["deletionTimestamp"] = _now()
                if (proc := self.procs.get(name)) is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

    def _stop_job(self, job: str) -> None:
        for name in [n for n, p in self.pods.items() if p["metadata"]["labels"].get("job-name") == job]:
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            del self.pods[name]

    def close(self) -> None:
        self.release.set()
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        self.server.shutdown()
        self.server.server_close()


def connect(cluster: FakeCluster, monkeypatch: Any) -> Any:
    """The API client a controller outside the cluster would have (its kubeconfig), talking to `cluster`."""
    from clustercheck.run.k8s import api

    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return api.connect()


def cluster_fixture(*nodes: str) -> Any:
    """The pytest fixture `cluster` of a test module: a FakeCluster with `nodes`, its files (and its pods' logs)
    in the test's tmp_path, serving for one test and closed after it, pass or fail (its processes killed, its
    port freed). A module assigns it: `cluster = cluster_fixture("kw-node-0", "kw-node-1")`."""
    @pytest.fixture(name="cluster")
    def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
        made = FakeCluster(tmp_path, nodes=nodes)
        try:
            yield made
        finally:
            made.close()

    return cluster


def kube_fixture(*, answered: bool = False) -> Any:
    """The pytest fixture `kube`: the API client `connect` gives for the module's `cluster`. `answered`: as if the
    pre-flight had found the server answering, so that a call it fails is the harness's error, not the user's."""
    @pytest.fixture(name="kube")
    def kube(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> Any:
        made = connect(cluster, monkeypatch)
        if answered:
            made.answered = True
        return made

    return kube
