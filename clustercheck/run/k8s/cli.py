"""`clustercheck k8s render SUITE --nodes N --image IMAGE [...]`: the manifests of a run, as YAML to apply
with kubectl (or to read before `--launcher k8s` creates the same through the API)."""

from __future__ import annotations

import argparse
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from clustercheck.argtypes import given
from clustercheck.errors import UserError, escape, show
from clustercheck.run.k8s import labels, manifests
from clustercheck.run import gang


def add_parser(sub: Any) -> None:
    k8s = sub.add_parser("k8s", help="Kubernetes: print the manifests of a run (render)",
                         description="Kubernetes manifests for a run: docs/kubernetes.md")
    verbs = k8s.add_subparsers(dest="k8s_command", metavar="ACTION")
    r = verbs.add_parser("render", help="print the headless Service, the agents' Indexed Job, their Secret and "
                                        "(--controller in-cluster) the controller's Job and RBAC",
                         description="Print YAML for `kubectl apply -f -`: a headless Service, the node agents as "
                                     "an Indexed Job (one pod per node), the Secret they authenticate with and, with "
                                     "--controller in-cluster (the default), the controller as a Job with the least "
                                     "RBAC it needs. Schema-valid for Kubernetes 1.30 and later.")
    r.add_argument("suite", metavar="SUITE", help="a shipped suite's name (in the image), or a suite file of yours "
                                                  "(carried to the controller in a ConfigMap)")
    r.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes to test: one agent pod on each")
    r.add_argument("--image", required=True, metavar="IMAGE", help="an image with clustercheck and torch")
    r.add_argument("--namespace", default="default", metavar="NS", help="default: default")
    r.add_argument("--name", default="clustercheck", metavar="NAME",
                   help="the Job's and Service's name (default: clustercheck)")
    r.add_argument("--gpus-per-node", type=int, default=0, metavar="G",
                   help="nvidia.com/gpu per pod (default 0: a CPU run, --local-ranks ranks per node)")
    r.add_argument("--local-ranks", type=int, metavar="K", help="ranks per node on CPU nodes (default 2)")
    r.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE",
                   help="only nodes with this label (repeatable)")
    r.add_argument("--rdma", action="append", default=[], metavar="RESOURCE=COUNT",
                   help="an RDMA device resource per pod, e.g. rdma/ib=1 (repeatable; adds IPC_LOCK)")
    r.add_argument("--controller", default="in-cluster", metavar="in-cluster|HOST:PORT",
                   help="where the controller runs: in-cluster (a Job rendered here; default), or the HOST:PORT of "
                        "`clustercheck run --launcher join --store-addr HOST:PORT` running elsewhere")
    r.add_argument("--port", type=int, default=gang.DEFAULT_PORT, metavar="PORT",
                   help=f"the in-cluster controller's port (default {gang.DEFAULT_PORT})")
    r.add_argument("--shm", default="", metavar="SIZE",
                   help="/dev/shm per pod, memory-backed (default 16Gi with GPUs, 1Gi without)")
    r.add_argument("--deadline", type=int, default=12 * 3600, metavar="SECONDS",
                   help="activeDeadlineSeconds of the Jobs (default 43200)")
    r.add_argument("--join-timeout", type=float, default=gang.JOIN_TIMEOUT, metavar="SECONDS",
                   help=f"how long agents and controller wait for each other (default {gang.JOIN_TIMEOUT:g})")
    r.add_argument("--taint", action="store_true",
                   help="in-cluster controller: taint failed nodes (adds a ClusterRole to get and patch nodes)")
    r.add_argument("--results-claim", metavar="PVC", type=given("--results-claim"),  # '' is no claim: refused
                   help="in-cluster controller: a PersistentVolumeClaim for its run directory (default: an emptyDir; "
                        "the verdicts are in its log)")


def main(args: argparse.Namespace) -> int:
    if args.k8s_command != "render":
        raise UserError("clustercheck k8s needs an action: render (clustercheck k8s render --help)")
    sys.stdout.write(render(args))
    return 0


def render(args: argparse.Namespace, token: str | None = None) -> str:
    import yaml

    labels.agent_options({"nodes": args.nodes})  # as a run checks it: an Indexed Job has at most 100000
    if not 0 <= args.gpus_per_node <= 1024:
        raise UserError(f"--gpus-per-node must be between 0 and 1024, got {args.gpus_per_node}")
    if args.local_ranks is not None and (args.gpus_per_node or not 1 <= args.local_ranks <= 1024):
        raise UserError("--local-ranks K (1-1024) is for CPU nodes; with GPUs each node runs one rank per GPU")
    labels.image_ref(args.image)
    if args.results_claim is not None:
        labels.subdomain(args.results_claim, "--results-claim")
    if not 0 < args.port < 65536 or args.deadline < 1 or not 0 < args.join_timeout <= 86400:
        raise UserError("--port must be 1-65535, --deadline at least 1 s, --join-timeout 1-86400 s")
    if args.shm and not _quantity(args.shm):
        raise UserError(f"--shm {args.shm!r}: a size such as 8Gi or 512Mi")
    in_cluster = args.controller == "in-cluster"
    name = labels.dns_label(args.name, "--name")
    if len(name) > 50:  # pods are <name>-<index>-<suffix>, and the controller <name>-controller
        raise UserError(f"--name {name!r}: at most 50 characters (pod and controller names add to it)")
    if in_cluster:
        controller = f"controller.{name}:{args.port}"
    else:
        host, port = gang.split_addr(args.controller, "--controller", default_port=None)
        controller = f"{host}:{port}"
    a = manifests.Agents(name=name, namespace=labels.dns_label(args.namespace, "--namespace"), nodes=args.nodes,
                         image=args.image, controller=controller, gpus_per_node=args.gpus_per_node,
                         local_ranks=None if args.gpus_per_node else args.local_ranks or 2,
                         node_selector=labels.selectors(args.node_selector), rdma=labels.resources(args.rdma),
                         deadline_s=args.deadline, shm=args.shm, join_timeout=args.join_timeout)
    if escape(args.suite) != args.suite:  # it is written into the YAML's comment and a shell line: one plain line
        raise UserError(f"SUITE {show(args.suite)}: a suite name or file without control characters (newlines, ESC)")
    if not in_cluster:
        _elsewhere(args.suite)
    suite, suite_text = _suite(args.suite) if in_cluster else (args.suite, None)
    token = token or secrets.token_hex(32)
    docs = [manifests.secret(a, token), manifests.service(a, args.port if in_cluster else None), manifests.job(a)]
    if in_cluster:
        docs += manifests.controller(a, suite, args.port, taint=args.taint, results_claim=args.results_claim,
                                     suite_text=suite_text)
    elif args.taint or args.results_claim:
        raise UserError("--taint and --results-claim are for --controller in-cluster (a controller elsewhere takes "
                        "--taint itself)")
    how = (f"kubectl logs -n {a.namespace} -f job/{name}-controller" if in_cluster else
           f"on the controller: CLUSTERCHECK_TOKEN=$(kubectl get secret -n {a.namespace} {a.secret} -o "
           f"jsonpath='{{.data.token}}' | base64 -d) clustercheck run {shlex.quote(args.suite)} --launcher join --nodes "
           f"{args.nodes} --store-addr {controller}")
    head = (f"# clustercheck k8s render: {args.nodes} node agent(s), {a.gpus_per_node or 'no'} GPU(s) each; "
            f"apply with kubectl apply -f -\n# {how}\n# remove: kubectl delete -n {a.namespace} job,service,secret,"
            f"configmap,serviceaccount,role,rolebinding -l {manifests.RUN_LABEL}={name}\n")
    if in_cluster and args.taint:  # cluster-scoped: by its name, which holds the namespace (a label may be in several)
        head += f"#   and: kubectl delete clusterrole,clusterrolebinding {manifests.taint_role(a)}\n"
    return head + "".join("---\n" + yaml.safe_dump(d, sort_keys=False, width=1000) for d in docs)


def _suite(name: str) -> tuple[str, str | None]:
    """A shipped suite by name (the image has it), or a suite file of the user's, checked here and
    carried in a ConfigMap."""
    from clustercheck.paths import data_dir, display
    from clustercheck.suite.load import is_yaml_name, load_suite

    path, shipped = Path(name), data_dir("suites") / f"{name}.yaml"
    if not path.is_file():
        if is_yaml_name(path) or not shipped.is_file():
            known = ", ".join(sorted(p.stem for p in data_dir("suites").glob("*.yaml")))
            raise UserError(f"no suite file or shipped suite named {name!r} (shipped suites: {known})")
        path = shipped
    load_suite(path, display(path))  # a bad suite is refused here, not in the cluster
    return (name, None) if path == shipped else ("suite.yaml", path.read_text(encoding="utf-8"))


def _elsewhere(name: str) -> None:
    """The suite a controller elsewhere will run, checked as `clustercheck run` finds and loads it (from where
    render runs: the controller's directory, as the printed command assumes): a mistake is one line here."""
    from clustercheck.paths import display
    from clustercheck.run.command import resolve_suite
    from clustercheck.suite.load import load_suite

    path = resolve_suite(name)
    load_suite(path, display(path))


def _quantity(text: str) -> bool:
    import re

    return bool(re.fullmatch(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?", text))
