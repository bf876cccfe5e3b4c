"""The Kubernetes objects of a run, as plain dicts: the node agents as an Indexed Job behind a headless
Service (kubernetes.io, "Job with Pod-to-Pod Communication"), the Secret they authenticate with, and,
for a controller inside the cluster, its Job with the least RBAC it needs. `clustercheck k8s render`
prints them; `--launcher k8s` creates the first three through the API. docs/kubernetes.md explains
each field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clustercheck.run import gang

RUN_LABEL = "clustercheck.io/run"  # every object of a run carries it: `kubectl delete all -l` finds them
ROLE_LABEL = "clustercheck.io/role"  # agent or controller
MANAGED = {"app.kubernetes.io/managed-by": "clustercheck"}
TOKEN_KEY = "token"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Agents:
    """What the agents' Indexed Job is made of."""

    name: str  # the Job's, the Service's and the run's name (a DNS label)
    namespace: str
    nodes: int
    image: str
    controller: str  # HOST:PORT the agents reach the controller at
    gpus_per_node: int = 0
    local_ranks: int | None = None  # CPU runs: ranks per node
    node_selector: tuple[tuple[str, str], ...] = ()
    rdma: tuple[tuple[str, str], ...] = ()
    deadline_s: int = 12 * 3600  # activeDeadlineSeconds: a run that outlives it is ended by Kubernetes
    shm: str = ""  # /dev/shm size; "" picks one (NCCL keeps its intra-node buffers there)
    join_timeout: float = gang.JOIN_TIMEOUT

    @property
    def secret(self) -> str:
        return f"{self.name}-token"

    @property
    def shm_size(self) -> str:
        return self.shm or ("16Gi" if self.gpus_per_node else "1Gi")

    def labels(self, role: str | None = None) -> dict[str, str]:
        return {RUN_LABEL: self.name, **MANAGED, **({ROLE_LABEL: role} if role else {})}

    def meta(self, name: str, role: str | None = None) -> dict[str, Any]:
        return {"name": name, "namespace": self.namespace, "labels": self.labels(role)}


def secret(a: Agents, token: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": a.meta(a.secret), "type": "Opaque",
            "stringData": {TOKEN_KEY: token}}


def service(a: Agents, port: int | None = None) -> dict[str, Any]:
    """Headless: each pod gets the DNS name `<job>-<index>.<service>` (and the controller pod, under
    --controller in-cluster, `controller.<service>`), published before the pods are ready, since the
    agents are reached long before anything would call them ready."""
    spec: dict[str, Any] = {"clusterIP": "None", "selector": {RUN_LABEL: a.name}, "publishNotReadyAddresses": True}
    if port is not None:
        spec["ports"] = [{"name": "store", "port": port, "targetPort": port, "protocol": "TCP"}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": a.meta(a.name), "spec": spec}


def _token_env(a: Agents) -> dict[str, Any]:
    return {"name": gang.TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": a.secret, "key": TOKEN_KEY}}}


def job(a: Agents, suspend: bool = False) -> dict[str, Any]:
    """The agents: one pod per node (required anti-affinity on the node's hostname label), index i in
    JOB_COMPLETION_INDEX (set by the Job controller in every pod of an Indexed Job), the node's name
    from the downward API, nothing retried and nothing ended for another's failure (backoffLimitPerIndex 0: a
    failed index is a finding, not a retry; maxFailedIndexes N: the Job goes on while any index runs, where
    backoffLimit 0 failed the whole Job at one failed pod and Kubernetes then terminated every other agent)."""
    args = ["agent", "--join-timeout", f"{a.join_timeout:g}"]
    if a.local_ranks:
        args += ["--local-ranks", str(a.local_ranks)]
    limits = {**({GPU: str(a.gpus_per_node)} if a.gpus_per_node else {}), **dict(a.rdma)}
    container: dict[str, Any] = {
        "name": "agent", "image": a.image, "imagePullPolicy": "IfNotPresent", "command": ["clustercheck"],
        "args": args,
        "env": [{"name": gang.NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": gang.CONTROLLER_ENV, "value": a.controller}, _token_env(a)],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if limits:
        container["resources"] = {"limits": limits}
    if a.rdma:  # registering RDMA memory pins it: verbs need a locked-memory limit the default lacks
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    pod: dict[str, Any] = {
        "subdomain": a.name, "restartPolicy": "Never", "enableServiceLinks": False,
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {RUN_LABEL: a.name, ROLE_LABEL: "agent"}},
             "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [container],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": a.shm_size}}],
    }
    if a.node_selector:
        pod["nodeSelector"] = dict(a.node_selector)
    if a.gpus_per_node:  # GPU node pools are commonly tainted so that only GPU pods land there
        pod["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": a.meta(a.name, "agent"),
            "spec": {**({"suspend": True} if suspend else {}), "completionMode": "Indexed", "completions": a.nodes, "parallelism": a.nodes,
                     "backoffLimitPerIndex": 0, "maxFailedIndexes": a.nodes, "activeDeadlineSeconds": a.deadline_s, "ttlSecondsAfterFinished": 3600,
                     "template": {"metadata": {"labels": a.labels("agent")}, "spec": pod}}}


def owned_by(obj: dict[str, Any], job_name: str, job_uid: str) -> dict[str, Any]:
    """`obj` owned by the agents' Job: Kubernetes' garbage collector deletes it with the Job (the Job's
    ttlSecondsAfterFinished), so a controller killed outright (SIGKILL, OOM) leaves no Secret or Service."""
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}


# -- the controller inside the cluster ------------------------------------------------------------

POD_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
             {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},  # whether the agents' Job failed
             {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]  # FailedCreate: why an index has no pod
NODE_RULES = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]


def taint_role(a: Agents) -> str:
    """The name of the ClusterRole and ClusterRoleBinding that let the in-cluster controller taint nodes."""
    return f"{a.namespace}-{a.name}-controller-taint"


def controller(a: Agents, suite: str, port: int, *, taint: bool = False, results_claim: str | None = None,
               suite_text: str | None = None) -> list[dict[str, Any]]:
    """The controller as a Job (`clustercheck run SUITE --launcher join`), its ServiceAccount and the
    least RBAC it needs: read the agents' pods (to name an agent that never joined by its pod and the
    reason Kubernetes gives) and the Events of their Job (a pod admission refused is never made: only the
    Job controller's FailedCreate says why), and, with --taint only, get and patch nodes (cluster-scoped, so a
    ClusterRole). `suite_text`: a suite file of the user's, carried in a ConfigMap."""
    name = f"{a.name}-controller"
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": a.meta(name, "controller"),
          "automountServiceAccountToken": True}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": a.meta(name, "controller"),
            "rules": POD_RULES}
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": a.namespace}]
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": a.meta(name, "controller"), "subjects": subject,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}}
    out: list[dict[str, Any]] = [sa, role, binding]
    args = ["run", suite, "--launcher", "join", "--nodes", str(a.nodes), "--store-addr", f"controller.{a.name}:{port}",
            "--join-timeout", f"{a.join_timeout:g}", "--k8s-job", a.name, "--out", "/results"]
    if taint:
        cluster_name = taint_role(a)
        cluster_meta = {"name": cluster_name, "labels": a.labels("controller")}
        out += [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": cluster_meta,
                 "rules": NODE_RULES},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": cluster_meta,
                 "subjects": subject,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name}}]
        args.append("--taint")
    mounts: list[dict[str, Any]] = [{"name": "results", "mountPath": "/results"}]
    volumes: list[dict[str, Any]] = [{"name": "results", **({"persistentVolumeClaim": {"claimName": results_claim}}
                                                            if results_claim else {"emptyDir": {}})}]
    if suite_text is not None:
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": a.meta(f"{a.name}-suite", "controller"),
                    "data": {"suite.yaml": suite_text}})
        args[1] = "/suite/suite.yaml"
        mounts.append({"name": "suite", "mountPath": "/suite", "readOnly": True})
        volumes.append({"name": "suite", "configMap": {"name": f"{a.name}-suite"}})
    container = {"name": "controller", "image": a.image, "imagePullPolicy": "IfNotPresent",
                 "command": ["clustercheck"], "args": args, "env": [_token_env(a)],
                 "ports": [{"name": "store", "containerPort": port, "protocol": "TCP"}], "volumeMounts": mounts}
    pod = {"serviceAccountName": name, "hostname": "controller", "subdomain": a.name, "restartPolicy": "Never",
           "enableServiceLinks": False, "containers": [container], "volumes": volumes}
    out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": a.meta(name, "controller"),
                "spec": {"backoffLimit": 0, "activeDeadlineSeconds": a.deadline_s, "ttlSecondsAfterFinished": 86400,
                         "template": {"metadata": {"labels": a.labels("controller")}, "spec": pod}}})
    return out
