"""The Kubernetes API through the official client (`kubernetes`, imported here only): credentials from the
in-cluster service account or a kubeconfig, a pre-flight that says in one line what is missing before
anything is created (credentials, a namespace, an RBAC verb), creating and deleting exactly the objects
a run made (by uid), the agents' pods and why one never started, and nodes for --taint."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from clustercheck.errors import HarnessError, UserError, escape
from clustercheck.run.gang import NOT_THE_NODE

# what a call of the API can end in: bad input or a refusal (UserError, exit 4), or the server failing or gone
# once the pre-flight found it answering (HarnessError, exit 3)
KubeError = (UserError, HarnessError)

SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# (connect, read) seconds for every API call: a server that never answers must not hold a run (or its cleanup,
# during which SIGINT and SIGTERM wait) for ever
REQUEST_TIMEOUT = (5.0, 30.0)
JOB_LABEL = "job-name"  # set on a Job's pods by the Job controller (batch.kubernetes.io/job-name too since 1.27)


@dataclass(frozen=True)
class Need:
    """An RBAC permission the run needs: verb on resource (group "" is the core API)."""

    verb: str
    resource: str
    group: str = ""
    namespaced: bool = True

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}{'.' + self.group if self.group else ''}"


@dataclass(frozen=True)
class Made:
    """An object this run created: only these are ever deleted, and only while their uid is the same."""

    kind: str
    name: str
    uid: str


def _client() -> Any:
    try:
        import kubernetes
    except ImportError:
        raise UserError("the Kubernetes parts of clustercheck need the official client: pip install "
                        "'clustercheck[k8s]' (or pip install kubernetes)") from None
    return kubernetes


def connect(namespace: str | None = None) -> Kube:
    """Credentials from the pod's service account (inside a cluster, without $KUBECONFIG) or the
    kubeconfig ($KUBECONFIG, else ~/.kube/config); UserError in one line when there are none."""
    k = _client()
    cfg = k.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
        try:
            k.config.load_incluster_config(client_configuration=cfg)
        except k.config.ConfigException as exc:
            raise UserError(f"inside a pod, but its service account cannot be read: {exc}") from None
        try:
            own = SA_NAMESPACE.read_text().strip()
        except OSError:
            own = "default"
        return Kube(k.client.ApiClient(_bounded(cfg)), namespace or own, "the pod's service account")
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p] or [str(Path("~/.kube/config").expanduser())]
    found = [p for p in paths if Path(p).is_file()]
    if not found:
        where = f"$KUBECONFIG={os.environ['KUBECONFIG']}" if os.environ.get("KUBECONFIG") else paths[0]
        raise UserError(f"no Kubernetes credentials: no kubeconfig at {where}, and not inside a pod")
    try:
        k.config.load_kube_config(config_file=found[0], client_configuration=cfg, persist_config=False)
        _, active = k.config.list_kube_config_contexts(config_file=found[0])
    except (k.config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise UserError(f"kubeconfig {found[0]}: {str(exc).splitlines()[0]}") from None
    ns = namespace or (active or {}).get("context", {}).get("namespace") or "default"
    return Kube(k.client.ApiClient(_bounded(cfg)), ns, f"kubeconfig {found[0]}")


def _bounded(cfg: Any) -> Any:
    """No call is sent again after its read timed out (urllib3 retries an unanswered GET or DELETE three times
    by default, which would make REQUEST_TIMEOUT's 30 s two minutes); a refused connection is still retried."""
    import urllib3

    cfg.retries = urllib3.util.Retry(total=3, read=0, redirect=3)
    return cfg


def status_message(exc: Exception) -> str:
    """What the API said, from its Status object (kubernetes.io API conventions: `message`), else the
    HTTP status and reason; or the connection error."""
    body = getattr(exc, "body", None)
    if body:
        try:
            found = json.loads(body)
            if isinstance(found, dict) and found.get("message"):
                return str(found["message"])
        except ValueError:
            pass
    if getattr(exc, "status", None):
        return f"HTTP {exc.status} {getattr(exc, 'reason', '')}".strip()  # type: ignore[attr-defined]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class Conflict(UserError):
    """HTTP 409: the object exists already, or changed since it was read (a resourceVersion precondition)."""


INPUT_REFUSED = (400, 403, 404, 409, 422)  # bad request, forbidden, not found, conflict, invalid: the user's to mend


def timed_out(exc: BaseException) -> bool:
    """Whether a call ended for want of an answer (urllib3's connect or read timeout, as itself or as the
    reason of its MaxRetryError)."""
    import urllib3

    return isinstance(exc, urllib3.exceptions.TimeoutError) or \
        isinstance(getattr(exc, "reason", None), urllib3.exceptions.TimeoutError)


class Kube:
    def __init__(self, api: Any, namespace: str, source: str) -> None:
        k = _client()
        self.k = k
        self.api = api
        self.namespace = namespace
        self.source = source  # where the credentials came from, for messages
        self.answered = False  # the pre-flight found the server answering: from now on its failure is the harness's
        self.core = k.client.CoreV1Api(api)
        self.batch = k.client.BatchV1Api(api)
        self.authz = k.client.AuthorizationV1Api(api)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One API call, bounded by REQUEST_TIMEOUT; a refusal or an unreachable server becomes UserError
        naming `what`."""
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        try:
            return fn(*args, **kwargs)
        except self.k.client.ApiException as exc:
            if exc.status == 404 and "namespaces" in status_message(exc) and "not found" in status_message(exc):
                raise UserError(f"namespace {self.namespace!r} not found ({self.source})") from None
            if exc.status == 409:  # AlreadyExists, or a stale resourceVersion: the caller may read again and retry
                raise Conflict(f"{what}: {status_message(exc)}") from None
            # the server's own failure (5xx), or, once it answered the pre-flight, any answer but a refusal of the
            # input (429 throttled, 401 a token expired, 410): never the user's input
            if (exc.status or 0) >= 500 or (self.answered and exc.status not in INPUT_REFUSED):
                raise HarnessError(f"{what}: the Kubernetes API failed: {status_message(exc)}") from None
            raise UserError(f"{what}: {status_message(exc)}") from None
        except Exception as exc:  # urllib3: connection refused, TLS, DNS, a timeout
            host = getattr(self.api.configuration, "host", "?")
            said = f"{what}: cannot reach the Kubernetes API at {host} ({'timed out' if timed_out(exc) else status_message(exc)})"
            raise (HarnessError(said) if self.answered else UserError(said)) from None

    # -- pre-flight ---------------------------------------------------------------------------------
    def missing(self, needs: Iterable[Need]) -> list[Need]:
        """The permissions this identity lacks (SelfSubjectAccessReview: the API server answers for the
        caller's own RBAC, which any authenticated user may ask)."""
        out = []
        for need in needs:
            attrs = {"verb": need.verb, "resource": need.resource, "group": need.group,
                     **({"namespace": self.namespace} if need.namespaced else {})}
            review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "spec": {"resourceAttributes": attrs}}
            answer = self._call(f"asking the API server whether this identity may {need}",
                                self.authz.create_self_subject_access_review, review)
            if not answer.status.allowed:
                out.append(need)
        return out

    def preflight(self, needs: Iterable[Need], objects: Iterable[dict[str, Any]]) -> None:
        """Before anything is made: every permission (one line naming those missing), then each object
        created with dryRun=All, which the API server admits, validates and refuses as it would the
        real one (an unknown namespace, an invalid field), and stores nothing."""
        missing = self.missing(needs)
        if missing:
            scope = f"in namespace {self.namespace}"
            raise UserError(f"forbidden ({self.source}): this identity may not {', '.join(map(str, missing))} "
                            f"{scope} (docs/kubernetes.md: RBAC)")
        for obj in objects:
            self.create(obj, dry_run=True)
        self.answered = True

    # -- objects ------------------------------------------------------------------------------------
    def _create_fn(self, kind: str) -> Any:
        return {"Secret": self.core.create_namespaced_secret, "Service": self.core.create_namespaced_service,
                "Job": self.batch.create_namespaced_job}[kind]

    def create(self, obj: dict[str, Any], dry_run: bool = False) -> Made:
        kind, name = obj["kind"], obj["metadata"]["name"]
        extra = {"dry_run": "All"} if dry_run else {}
        made = self._call(f"creating {kind} {name} in namespace {self.namespace}{' (dry run)' if dry_run else ''}",
                          self._create_fn(kind), self.namespace, obj, **extra)
        return Made(kind, name, str(made.metadata.uid or ""))

    def delete(self, made: Made, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> str:
        """Delete an object this run created, only if it is still that object (uid precondition), its pods
        with it; '' when done or already gone, else why not ("timed out" when no answer came in `timeout`)."""
        fn = {"Secret": self.core.delete_namespaced_secret, "Service": self.core.delete_namespaced_service,
              "Job": self.batch.delete_namespaced_job}[made.kind]
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background",
                "preconditions": {"uid": made.uid}}
        try:
            fn(made.name, self.namespace, body=body, _request_timeout=timeout)
        except self.k.client.ApiException as exc:
            if exc.status == 404:
                return ""
            return status_message(exc)
        except Exception as exc:
            return "timed out" if timed_out(exc) else status_message(exc)
        return ""

    def job(self, name: str) -> Any:
        return self._call(f"reading Job {name}", self.batch.read_namespaced_job, name, self.namespace)

    def find_job(self, name: str, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> Any | None:
        """The Job `name`, None where there is none (404: a create that was never stored); raises HarnessError
        saying why when it cannot be read (a 403, the server failing, no answer in `timeout`)."""
        try:
            return self.batch.read_namespaced_job(name, self.namespace, _request_timeout=timeout)
        except self.k.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise HarnessError(f"reading Job {name}: {status_message(exc)}") from None
        except Exception as exc:
            raise HarnessError(f"reading Job {name}: {'timed out' if timed_out(exc) else status_message(exc)}") from None

    def pods(self, job: str) -> list[Any]:
        return list(self._call(f"listing the pods of Job {job}", self.core.list_namespaced_pod, self.namespace,
                               label_selector=f"{JOB_LABEL}={job}").items)

    def events(self, kind: str, name: str, uid: str = "", reason: str = "") -> list[Any]:
        """The Events recorded on one object (core/v1), oldest first: a field selector on the involved object's
        kind and name, and its uid where known (an Event of an earlier object of the same name outlives it)."""
        fields = [f"involvedObject.kind={kind}", f"involvedObject.name={name}"]
        fields += [f"involvedObject.uid={uid}"] if uid else []
        fields += [f"reason={reason}"] if reason else []
        found = self._call(f"listing the events of {kind} {name}", self.core.list_namespaced_event, self.namespace,
                           field_selector=",".join(fields))
        return sorted(found.items or [], key=_when)

    # -- nodes (--taint) ----------------------------------------------------------------------------
    def node(self, name: str) -> Any:
        return self._call(f"reading node {name}", self.core.read_node, name)

    def nodes(self) -> list[Any]:
        return list(self._call("listing nodes", self.core.list_node).items)

    def resume_job(self, made: Made) -> None:
        """Let a Job made suspended start its pods (spec.suspend false)."""
        self._call(f"starting Job {made.name}", self.batch.patch_namespaced_job, made.name, self.namespace,
                   {"spec": {"suspend": False}})

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self._call(f"patching node {name}", self.core.patch_node, name, body)


def index_of(pod: Any) -> int | None:
    """The pod's completion index, or None where it has none that is a whole number in ASCII digits (isdigit()
    takes '²' or '٣', which int() refuses or reads as another index)."""
    raw = (pod.metadata.annotations or {}).get(INDEX_ANNOTATION) or (pod.metadata.labels or {}).get(INDEX_ANNOTATION)
    return int(raw) if raw is not None and re.fullmatch(r"[0-9]{1,6}", str(raw)) else None


def never_started(pod: Any) -> str:
    """Why a pod's agent is not running, from the pod's status: a waiting or ended container (image pull
    errors, a missing Secret, a crash), else an unschedulable condition, else its phase. Escaped: the words
    are the scheduler's, a webhook's or the kubelet's, and are printed (an ESC or a newline would reach the
    terminal, or forge a line of the run's)."""
    return escape(_never_started(pod))


def _never_started(pod: Any) -> str:
    status = pod.status
    if status and status.reason:  # the kubelet's word on the whole pod: Evicted, UnexpectedAdmissionError, ...
        return f"{status.reason}: {status.message or ''}".rstrip(": ")
    for cs in (status.container_statuses or []) if status else []:
        state = cs.state
        if state and state.waiting and state.waiting.reason:
            return f"{state.waiting.reason}: {state.waiting.message or ''}".rstrip(": ")
        if state and state.terminated:
            t = state.terminated
            return f"its container ended (exit code {t.exit_code}{', ' + t.reason if t.reason else ''})"
    for cond in (status.conditions or []) if status else []:
        if cond.type == "PodScheduled" and cond.status == "False":
            return f"{cond.reason or 'not scheduled'}: {cond.message or ''}".rstrip(": ")
    phase = status.phase if status else None
    return f"phase {phase}" if phase else "no status yet"


def ended(pod: Any) -> bool:
    """The pod will never run its agent now (Failed or Succeeded)."""
    return bool(pod.status and pod.status.phase in ("Failed", "Succeeded"))


UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")  # the Job's uid, set on its pods


def owner_uid(pod: Any) -> str:
    """The uid of the Job that made `pod`, from its labels ("" where it has none)."""
    labels = pod.metadata.labels or {}
    return str(next((labels[k] for k in UID_LABELS if labels.get(k)), ""))


def recency(pod: Any) -> tuple[bool, datetime]:
    """How a pod ranks among pods of one index: one that has not ended first, then the newest."""
    made = pod.metadata.creation_timestamp
    return not ended(pod), made if isinstance(made, datetime) else _EPOCH


# DisruptionTarget reasons that say the node went: NotReady or unreachable (the taint manager evicts its pods),
# or deleted (the pod garbage collector removes its pods); every other reason is an eviction, a preemption or
# a deletion that Kubernetes chose (kubernetes.io, "Pod disruption conditions")
NODE_WENT = {"DeletionByTaintManager", "DeletionByPodGC"}


def disrupted(pod: Any) -> tuple[str, bool] | None:
    """How Kubernetes ended a running pod's agent, read from the pod: (its words, escaped, whether the node is to
    blame), or None when the pod says nothing of it (it runs, as far as the API knows: the node or its network
    went)."""
    found = _disrupted(pod)
    return None if found is None else (escape(found[0]), found[1])


def _disrupted(pod: Any) -> tuple[str, bool] | None:
    name, status = pod.metadata.name, pod.status
    cond = next((c for c in (status.conditions or []) if c.type == "DisruptionTarget" and c.status == "True"), None) \
        if status else None
    went = cond is not None and cond.reason in NODE_WENT
    if status and status.reason:  # the kubelet's own word (Evicted, Terminated by a node shutdown, ...)
        return (f"pod {name} is {status.phase or 'ended'} ({status.reason}: {status.message or ''})".replace(": )", ")"),
                went or status.reason == "NodeLost")
    if cond is not None:
        return f"Kubernetes is ending pod {name} ({cond.reason or 'DisruptionTarget'}: {cond.message or ''})" \
            .replace(": )", ")"), went
    if pod.metadata.deletion_timestamp:
        return f"pod {name} is being deleted (since {pod.metadata.deletion_timestamp})", False
    for cs in (status.container_statuses or []) if status else []:
        t = cs.state.terminated if cs.state else None
        # the kubelet's own kill (OOM, or its SIGKILL/SIGTERM): its doing; any other end (a crash a GPU fault may
        # cause) says nothing of who is to blame, and the node's silence stands (None)
        if t is not None and (t.reason == "OOMKilled" or t.exit_code in (137, 143)):
            return f"pod {name}'s agent container ended (exit code {t.exit_code}{', ' + t.reason if t.reason else ''})", \
                False
        if t is not None and t.exit_code in NOT_THE_NODE:  # clustercheck's own bug, or input it refused
            return f"pod {name}'s agent ended with exit code {t.exit_code} (clustercheck's own error, not the node's)", \
                False
    return None


_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


def _when(event: Any) -> datetime:
    """When an Event last happened: lastTimestamp (core/v1 recorders), else eventTime (events.k8s.io ones)."""
    found = event.last_timestamp or event.event_time or (event.metadata.creation_timestamp if event.metadata else None)
    return found if isinstance(found, datetime) else _EPOCH


# what a FailedCreate says when admission refused the pod (a ResourceQuota, a LimitRange, PodSecurity, a webhook):
# the Job controller tries again, and is refused again until someone changes the policy, so it is worth no wait;
# any other failure (a timeout, the server's own error) may pass
REFUSED = re.compile(r"is forbidden|denied the request")


def failed_creates(events: list[Any], job: str, indices: list[int]) -> dict[int, str]:
    """index -> the latest FailedCreate message (of `events`, oldest first) that names a pod of `job`'s index
    (`pods "<job>-<index>-<suffix>" is forbidden: ...`, the Indexed Job's pod names), else the latest that
    names none (the Job's, said of every index)."""
    named: dict[int, str] = {}
    anyone = ""
    for e in events:
        message = escape(str(e.message or e.reason or "").strip())  # an admission webhook's words: printed
        found = re.search(rf'"{re.escape(job)}-(\d+)-', message)
        if found:
            named[int(found.group(1))] = message
        else:
            anyone = message
    return {i: named[i] if i in named else anyone for i in indices if i in named or anyone}


def job_failed(job: Any) -> tuple[str, str]:
    """The Job's Failed condition: (its reason, its words), ("", "") while it has none. Reason FailedIndexes
    (backoffLimitPerIndex) comes once every index ended and one failed: no pod was ended for it, so it
    excuses no agent's loss; DeadlineExceeded, BackoffLimitExceeded, MaxFailedIndexesExceeded end pods."""
    for cond in (job.status.conditions or []) if job.status else []:
        # FailureTarget: the Job controller has decided the Job fails and ends its pods before it says Failed
        if cond.type in ("Failed", "FailureTarget") and cond.status == "True":
            return str(cond.reason or "Failed"), escape(f"{cond.reason or 'Failed'}: {cond.message or ''}".rstrip(": "))
    return "", ""
