"""`--launcher k8s`: the node agents of `--launcher join` as an Indexed Job behind a headless Service, with
the Secret they authenticate with, created here through the Kubernetes API and deleted when the run ends
(whatever ends it: the last check, an error, SIGINT or SIGTERM).

Order: credentials, then every RBAC verb the run needs and each object created with dryRun=All (one
line, exit 4, and nothing made when any is missing), then the controller listens, then the objects are
made, then its store is served (torch imported while the pods start), and the agents awaited
(--join-timeout). A pod that never started (unschedulable, an image that cannot be pulled) is an absent
node named by its node (or its pod, when it was never scheduled) with the reason from its status; an index
with no pod at all, by the Job controller's FailedCreate Event (a quota or a policy refused it). When every
missing pod has ended, or was refused, the wait stops early. The agents must be able to reach this
controller: --store-addr HOST:PORT names where (docs/kubernetes.md)."""

from __future__ import annotations

import secrets
import socket
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Collection, Mapping

from clustercheck.errors import HarnessError, UserError, escape
from clustercheck.judging import platform
from clustercheck.judging.platform import Facts
from clustercheck.run.k8s import api, manifests
from clustercheck.run import gang
from clustercheck.run.join import JoinLauncher
from clustercheck.run.launcher import Loss, loopback
from clustercheck.run.signals import deferred, term_stops_like_ctrl_c

RUN_NEEDS = [api.Need("create", "secrets"), api.Need("delete", "secrets"), api.Need("create", "services"),
             api.Need("delete", "services"), api.Need("create", "jobs", "batch"), api.Need("delete", "jobs", "batch"),
             api.Need("patch", "jobs", "batch"), api.Need("get", "jobs", "batch"), api.Need("list", "pods")]
# `list events` (the Job controller's FailedCreate: why an index has no pod) is asked for, not required: without
# it the run goes on, and an index without a pod says the Events could not be read (JobPods.explain)
CLEANUP_S = 30.0  # the deletes at the end, all together: SIGINT and SIGTERM wait while they run
_DELETE_ORDER = ("Job", "Service", "Secret")
# each delete is sent once the one before it was answered (the Job, with its pods, first), or once it went this
# long unanswered: a server that answers none then holds the cleanup one call's timeout, not each call's in turn
ORDER_WAIT_S = 1.0
TAINT_NEEDS = [api.Need("get", "nodes", namespaced=False), api.Need("patch", "nodes", namespaced=False)]


class K8sLauncher(JoinLauncher):
    kind = "k8s"
    attempted = False  # a real create was sent: close() then always says what became of it
    unanswered = ""  # the Job whose create timed out or failed on the server's side: it may exist all the same

    @classmethod
    def from_options(cls, o: Any, nodes: int) -> K8sLauncher:
        made = cls(nodes, o.store_addr, o.join_timeout, image=o.image,
                   namespace=o.namespace, gpus_per_node=o.gpus_per_node, local_ranks=o.ranks,
                   node_selector=o.node_selector, rdma=o.rdma, taint=o.taint, duration=o.duration)
        made.thresholds = None if o.platform else o.thresholds  # detected from the nodes: checked against the GPUs
        return made

    def __init__(self, nodes: int, store_addr: str | None, timeout: float | None, *, image: str | None,
                 namespace: str | None = None, gpus_per_node: int = 0, local_ranks: int | None = None,
                 node_selector: tuple[tuple[str, str], ...] = (), rdma: tuple[tuple[str, str], ...] = (),
                 taint: bool = False, duration: float | None = None, kube: api.Kube | None = None) -> None:
        if not image:
            raise UserError("--launcher k8s needs --image IMAGE: an image with clustercheck and torch for the agents")
        if store_addr is None:  # the agents reach us where our hostname resolves, which must not be loopback
            store_addr = f"{_own_address()}:{gang.DEFAULT_PORT}"
        host, port = gang.split_addr(store_addr, "--store-addr")
        if loopback(host) or host == "0.0.0.0":
            raise UserError(f"--launcher k8s: the agents' pods must reach this controller, and {host} is not an "
                            "address they can reach: give --store-addr HOST:PORT (docs/kubernetes.md)")
        super().__init__(nodes, store_addr, timeout, token=secrets.token_hex(32), gather=False)
        self.made: list[api.Made] = []
        self.gpus_per_node = gpus_per_node
        self.thresholds: Any = None  # where the platform is detected, without --platform (check_facts)
        self.kube: api.Kube | None = None
        self._deleted = False
        try:
            self.kube = kube or api.connect(namespace)
            deadline = int(max(12 * 3600, (duration or 0) + 3600))  # a safety net: the run deletes the Job itself
            self.agents = manifests.Agents(
                name=f"clustercheck-{secrets.token_hex(3)}", namespace=self.kube.namespace, nodes=nodes, image=image,
                controller=f"{host}:{port}", gpus_per_node=gpus_per_node,
                local_ranks=None if gpus_per_node else local_ranks, node_selector=node_selector, rdma=rdma,
                deadline_s=deadline, join_timeout=self.timeout)
            secret, service = manifests.secret(self.agents, self.token), manifests.service(self.agents)
            self.kube.preflight(RUN_NEEDS + (TAINT_NEEDS if taint else []), [secret, service, manifests.job(self.agents)])
            self.listen()  # before any agent starts: an agent that connects waits in its backlog
            with term_stops_like_ctrl_c("while waiting for the agents"):
                # the Job first, suspended: the Secret and Service it owns are then deleted with it by Kubernetes
                # (a controller killed outright leaves neither), and no pod starts before its Secret is there.
                # Signals wait while an object is made: one that interrupted the call after the API made the
                # object would leave it unrecorded, and so never deleted
                with deferred():
                    self.attempted = True
                    try:
                        job = self.kube.create(manifests.job(self.agents, suspend=True))
                    except HarnessError:  # unanswered, or the server's own failure: it may have stored the Job,
                        self.unanswered = self.agents.name  # suspended, which then never ends: close() looks
                        raise
                    self.made.append(job)
                for obj in (secret, service):
                    with deferred():
                        self.made.append(self.kube.create(manifests.owned_by(obj, job.name, job.uid)))
                self.kube.resume_job(job)
                print(f"clustercheck: created Secret, Service and Job {self.agents.name} in namespace "
                      f"{self.kube.namespace} ({nodes} agent pod(s))", file=sys.stderr, flush=True)
                self.serve_store()  # the agents' pods start (their torch import) while this process imports torch
                self.pods = JobPods(self.kube, self.agents.name, job.uid)
                self.gather()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """The agents leave, then what this run created is deleted (by uid: never an object of the same
        name that someone else made), the Job first (delete_all); signals wait until that is done."""
        super().close()
        if self._deleted or self.kube is None:
            return
        self._deleted = True
        with deferred():  # bounded: every call, and the whole cleanup, has a deadline (a server that never answers)
            end = time.monotonic() + CLEANUP_S
            found, unread, gone = self._unanswered_job(self.kube, end) if self.unanswered else (None, "", "")
            made = self.made + ([found] if found else [])
            ordered = sorted(made, key=lambda m: _DELETE_ORDER.index(m.kind))  # the Job (its pods) first
            whys = delete_all(self.kube, ordered, end)
            failed = [f"{m.kind} {m.name} ({why})" for m, why in zip(ordered, whys) if why] + ([unread] if unread else [])
            if gone or (self.attempted and not made and not failed):
                print(f"clustercheck: {gone or 'nothing was made in namespace ' + self.kube.namespace}", file=sys.stderr,
                      flush=True)
            if made or failed:  # said before a signal held meanwhile reaches its handler
                *rest, last = [m.kind for m in ordered] or ["Job"]
                kinds = f"{', '.join(rest)} and {last}" if rest else last
                said = (f"could not delete {'; '.join(failed)}: remove what is left with kubectl delete -n "
                        f"{self.kube.namespace} job,service,secret -l {manifests.RUN_LABEL}={self.agents.name}") \
                    if failed else f"deleted {kinds} {self.agents.name}"
                print(f"clustercheck: {said}", file=sys.stderr, flush=True)

    def _unanswered_job(self, kube: api.Kube, end: float) -> tuple[api.Made | None, str, str]:
        """The Job whose create went unanswered (or failed on the server's side), read by name: (it, to delete
        by its uid, where it carries this run's label; why it could not be read; what became of it otherwise)."""
        name, left = self.unanswered, end - time.monotonic()
        try:
            if left <= 0.5:
                raise HarnessError("no time was left")
            obj = kube.find_job(name, (min(api.REQUEST_TIMEOUT[0], left), min(10.0, left)))
        except api.KubeError as exc:
            return None, f"Job {name} (its create was not answered, and it could not be read: {exc})", ""
        if obj is None:
            return None, "", f"Job {name} was not made (its create failed): nothing of it to delete"
        if (obj.metadata.labels or {}).get(manifests.RUN_LABEL) != self.agents.name or not obj.metadata.uid:
            return None, "", f"Job {name} is not this run's (no {manifests.RUN_LABEL}={self.agents.name}): left as it is"
        return api.Made("Job", name, str(obj.metadata.uid)), "", ""

    def check_facts(self, nodes: Mapping[str, Facts]) -> None:
        check_gpus(self.gpus_per_node, self.thresholds, nodes)


def delete_all(kube: api.Kube, ordered: list[api.Made], end: float) -> list[str]:
    """Delete `ordered`, each sent once the one before was answered or ORDER_WAIT_S passed without an answer, every
    call bounded by its own timeout and by `end` (time.monotonic()); -> why each was not deleted ("" where it was)."""
    if not ordered:
        return []
    sent: list[Future[str] | None] = []
    with ThreadPoolExecutor(max_workers=len(ordered), thread_name_prefix="k8s-delete") as pool:
        for m in ordered:
            wait([f for f in sent[-1:] if f is not None], timeout=ORDER_WAIT_S)
            left = end - time.monotonic()
            sent.append(pool.submit(kube.delete, m, (min(api.REQUEST_TIMEOUT[0], left), min(10.0, left)))
                        if left > 0.5 else None)
    return [f.result() if f is not None else "timed out" for f in sent]


def check_gpus(requested: int, thresholds: Any, nodes: Mapping[str, Facts]) -> None:
    """--gpus-per-node G, once the agents' ranks read their nodes: a platform detected (no --platform) whose
    nodes hold more GPUs than G is refused in one line (UserError), since each pod sees only its G and every
    node would fail as "GPUs missing", and be tainted; a pod that sees more than G GPUs is an error naming
    its node (the device plugin gave it more than it asked for); one that sees fewer is judged: a GPU gone."""
    if not requested:
        return
    if thresholds is not None:
        profile = platform.detect_nodes(thresholds, nodes)
        want = profile.detect.get("gpu_count")
        if isinstance(want, int) and requested < want:
            raise UserError(f"--gpus-per-node {requested} is fewer than the {want} GPUs of platform {profile.name}, "
                            f"which the nodes were detected as: each pod sees only its {requested}, so every node "
                            f"would fail as GPUs missing; name a profile of {requested} GPU(s) with --platform")
    wrong = {n: f.gpu_count for n, f in nodes.items() if f.gpu_count > requested}  # fewer: a GPU gone, judged
    if wrong:
        raise HarnessError(f"the agents' pods see more than the {requested} GPU(s) each requested "
                           f"(--gpus-per-node): " + "; ".join(f"{n}: {c}" for n, c in wrong.items()) +
                           ": an error of the device plugin or the node's allocation, nothing was measured")


class JobPods:
    """The agents' pods of one Indexed Job, read through the API: which have ended, and why an index
    never joined (join.Pods)."""

    def __init__(self, kube: api.Kube, job: str, uid: str = "") -> None:
        self.kube = kube
        self.job = job
        self.uid = uid  # the Job's: its Events, not those of an earlier Job of the same name ("": read when needed)

    def refused(self, missing: list[int]) -> dict[int, str]:
        """index -> the Job controller's latest FailedCreate Event naming its pod (or the Job's, naming none), for
        the indices of `missing`: a pod admission refused (a ResourceQuota, a LimitRange, PodSecurity) is never
        made, and only the Job's Events say why. Raises api.KubeError when the Events cannot be read."""
        if not self.uid:
            try:
                self.uid = str(self.kube.job(self.job).metadata.uid or "")
            except api.KubeError:
                pass  # by name and kind alone
        return api.failed_creates(self.kube.events("Job", self.job, self.uid, "FailedCreate"), self.job, missing)

    def _pods(self) -> list[Any]:
        """The pods labelled with the Job's name that are this Job's (by its uid, where known and the pod is
        labelled with one): a terminating pod of an earlier Job of the same name is not."""
        found = self.kube.pods(self.job)
        return [p for p in found if not self.uid or api.owner_uid(p) in ("", self.uid)]

    def by_index(self) -> dict[int, Any]:
        """index -> its pod; of two (a failed pod and its replacement), the one that has not ended, else the
        newest: the live replacement decides whether the wait goes on, and names the node."""
        out: dict[int, Any] = {}
        for pod in self._pods():
            if (i := api.index_of(pod)) is not None and (i not in out or api.recency(pod) >= api.recency(out[i])):
                out[i] = pod
        return out

    def ended(self, joined: Collection[int], expected: int) -> bool:
        try:
            pods = self.by_index()
        except api.KubeError:
            return False  # the pods cannot be read: wait the whole timeout
        missing = [i for i in range(expected) if i not in joined]
        if any(i in pods and not api.ended(pods[i]) for i in missing):
            return False  # a pod that may yet run its agent
        unmade = [i for i in missing if i not in pods]
        if not unmade:
            return True
        try:  # a failed Job makes no more pods; else each unmade index must have been refused by admission
            if api.job_failed(self.kube.job(self.job))[0]:
                return True
            refused = self.refused(unmade)
        except api.KubeError:
            return False  # not known: wait the whole timeout
        return all(api.REFUSED.search(refused.get(i, "")) for i in unmade)

    def disrupted(self, index: int, node: str, stopped: str = "") -> Loss | None:
        """How the pod of agent `index` on `node` was lost mid-run, read through the API: evicted, preempted,
        being deleted, OOM-killed or killed by the kubelet, or the Job failed (Kubernetes then ends every pod of
        it): the orchestrator's or the harness's doing, so the node is not blamed; its node NotReady or deleted
        (DisruptionTarget by the taint manager or the pod garbage collector): blamed; None when the pod still
        runs as far as the API knows (the node or its network went); blamed, saying so, when it cannot be read.
        `stopped`: the signal the agent said stopped it ("SIGTERM"): a pod gone then was deleted, evicted or
        preempted (seconds after its SIGTERM), since the pod GC removes a deleted node's pods without one."""
        try:
            pods = [p for p in self._pods() if api.index_of(p) == index and
                    (p.spec is None or p.spec.node_name in (None, node))]
        except api.KubeError as exc:  # not known: its silence is all there is, and the why says the read failed
            return Loss(f"its pod could not be read ({escape(str(exc))}), so its silence stands", True)
        try:
            reason, failed = api.job_failed(self.kube.job(self.job))
        except api.KubeError:
            reason, failed = "", ""  # not readable (the in-cluster controller's Role may lack it): the pods tell
        if reason == "FailedIndexes":  # every index ended, one failed: maybe this agent's own crash, which
            failed = ""  # Kubernetes only recorded, so it excuses nothing
        found = [d for p in pods if (d := api.disrupted(p)) is not None]
        blamed = next((d for d in found if d[1]), None)
        if blamed is not None:
            return Loss(blamed[0], True)
        if stopped == "SIGTERM" and not pods:  # gone; a DisruptionTarget other than the node going is in `found`
            return Loss("its agent was stopped by SIGTERM (pod deleted, evicted or preempted): not a fault of the "
                        "node", False)
        said = [d[0] for d in found]  # a pod gone says nothing else: the pod GC removes a deleted node's pods too
        if failed:
            said.append(f"the agents' Job {self.job} failed ({failed}), and Kubernetes ends its pods")
        if not said:
            return None
        return Loss(f"{'; '.join(said)}: Kubernetes or the harness ended its agent, not a fault of the node "
                    "(not measured, never excluded)", False)

    def explain(self, missing: list[int], bad: Mapping[int, str], timeout: float) -> dict[str, str]:
        """By node where the pod was scheduled (that node is untested), else by pod, with the reason
        from the pod's status (or the agent's own complaint)."""
        note = ""
        try:
            pods = self.by_index()
        except api.KubeError as exc:
            pods, note = {}, f" (its pod could not be read: {exc})"
        refused, unread = self._refused([i for i in missing if i not in pods and i not in bad]) if not note else ({}, "")
        out: dict[str, str] = {}
        for i in missing:
            pod = pods.get(i)
            if pod is None:
                out[f"{self.job}-{i}"] = bad.get(i) or (
                    f"no pod of Job {self.job} for index {i} was made: the Job controller's latest FailedCreate: "
                    f"{refused[i]}" if i in refused else
                    f"no pod of Job {self.job} for index {i} was found{note}{unread}")
                continue
            # the API's names, escaped as its words are (never_started): printed as they are
            name = escape(str(pod.spec.node_name if pod.spec and pod.spec.node_name else pod.metadata.name))
            running = pod.status is not None and pod.status.phase == "Running"
            pod_name = escape(str(pod.metadata.name))
            out[name] = bad.get(i) or (f"pod {pod_name} runs, but its agent did not join within {timeout:g} s"
                                       if running else f"pod {pod_name} never started its agent: {api.never_started(pod)}")
        return out


    def _refused(self, unmade: list[int]) -> tuple[dict[int, str], str]:
        """refused() for the indices without a pod, and what to add where the Events could not be read."""
        if not unmade:
            return {}, ""
        try:
            return self.refused(unmade), ""
        except api.KubeError as exc:  # a Role without `list events` (403): said, never taken as "none"
            return {}, f" (the Job's Events, which say why a pod was not made, could not be read: {exc})"


def _own_address() -> str:
    try:
        return socket.gethostbyname(socket.getfqdn())
    except OSError:
        return "127.0.0.1"


def job_pods(job: str, namespace: str | None) -> JobPods:
    """--launcher join --k8s-job JOB: the agents' pods, read with the credentials at hand (inside the
    cluster: the pod's service account, which k8s render gives `get` and `list` on pods)."""
    return JobPods(api.connect(namespace), job)
