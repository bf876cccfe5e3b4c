"""The syntax Kubernetes gives names, labels and resources (kubernetes.io "Labels and Selectors", "Object
Names and IDs", "Resource Management for Pods and Containers": extended resources), checked where the
user gives them, so that a mistake is one line before any object is made; and the node-agent options
of a run checked the same way. Imports no Kubernetes client."""

from __future__ import annotations

import re
from typing import Any, Iterable

from clustercheck.errors import UserError

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"^(?:(?P<prefix>{_SUBDOMAIN})/)?(?P<name>{_NAME})$")
_LABEL_VALUE = re.compile(rf"^(?:{_NAME})?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def label_key_ok(key: str) -> bool:
    m = _LABEL_KEY.match(key)
    return m is not None and len(m.group("prefix") or "") <= 253


def label_value_ok(value: str) -> bool:
    return bool(_LABEL_VALUE.match(value))


def label_value(text: str) -> str:
    """`text` made into a label value (a check id may be 100 characters): at most 63, alphanumeric at
    both ends, other characters replaced by '-'; where nothing is left (a check id of non-ASCII letters
    only), `check-<8 hex digits of its SHA-256>`, the same for the same id (never an empty taint value)."""
    value = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[:63]
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    if value or not text:
        return value
    import hashlib

    return f"check-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def dns_label(name: str, what: str) -> str:
    """A DNS label (RFC 1123: Services, namespaces); UserError naming `what` otherwise."""
    if not _DNS_LABEL.match(name):
        raise UserError(f"{what} {name!r}: a Kubernetes name is at most 63 lower-case letters, digits and '-', "
                        "starting and ending with a letter or digit")
    return name


def image_ref(image: str) -> str:
    """An image reference: one word without spaces or control characters (ESC, NUL: written into the pods'
    spec and printed); UserError in one line otherwise."""
    if not image.strip() or any(c.isspace() or not c.isprintable() for c in image):
        raise UserError(f"--image {image!r}: one image reference without spaces or control characters, e.g. "
                        "registry.example/clustercheck:1")
    return image


def subdomain(name: str, what: str) -> str:
    """A DNS-1123 subdomain (a PersistentVolumeClaim's name): at most 253 lower-case letters, digits, '-', '.'."""
    if len(name) > 253 or not re.fullmatch(_SUBDOMAIN, name):
        raise UserError(f"{what} {name!r}: a Kubernetes name is at most 253 lower-case letters, digits, '-' and "
                        "'.', starting and ending with a letter or digit")
    return name


def selectors(pairs: Iterable[str], what: str = "--node-selector") -> tuple[tuple[str, str], ...]:
    """KEY=VALUE node selectors, each checked as a label; UserError naming the bad one."""
    out: list[tuple[str, str]] = []
    for text in pairs:
        key, sep, value = text.partition("=")
        if not sep or not label_key_ok(key) or not label_value_ok(value):
            raise UserError(f"{what} {text!r}: expected KEY=VALUE with a label key ([prefix/]name, the name at "
                            "most 63 letters, digits, '-', '_', '.') and a label value (at most 63 such characters)")
        out.append((key, value))
    return tuple(out)


def resources(pairs: Iterable[str], what: str = "--rdma") -> tuple[tuple[str, str], ...]:
    """RESOURCE=COUNT extended resources (domain/name, e.g. rdma/ib=1); UserError naming the bad one."""
    out: list[tuple[str, str]] = []
    for text in pairs:
        name, sep, count = text.partition("=")
        m = _LABEL_KEY.match(name)
        if not sep or not m or not m.group("prefix") or m.group("prefix").endswith("kubernetes.io") \
                or not count.isdigit() or int(count) < 1:
            raise UserError(f"{what} {text!r}: expected RESOURCE=COUNT with an extended resource name "
                            "(domain/name, e.g. rdma/ib or nvidia.com/hostdev) and a whole count of 1 or more")
        out.append((name, str(int(count))))
    return tuple(out)


def agent_options(values: dict[str, Any]) -> dict[str, Any]:
    """--nodes, --join-timeout, --gpus-per-node, --node-selector and --rdma of a run, checked."""
    out: dict[str, Any] = {}
    if values.get("nodes") is not None and not 1 <= values["nodes"] <= 100_000:
        raise UserError(f"--nodes must be between 1 and 100000, got {values['nodes']}")
    timeout = values.get("join_timeout")
    if timeout is not None and not 0 < timeout <= 86_400:
        raise UserError(f"--join-timeout must be between 0 and 86400 seconds, got {timeout:g}")
    if not 0 <= (values.get("gpus_per_node") or 0) <= 1024:
        raise UserError(f"--gpus-per-node must be between 0 and 1024, got {values['gpus_per_node']}")
    if (image := values.get("image")) is not None:
        image_ref(image)
    if values.get("namespace") is not None:
        dns_label(values["namespace"], "--namespace")
    if values.get("k8s_job") is not None:
        dns_label(values["k8s_job"], "--k8s-job")
    out["node_selector"] = selectors(values.get("node_selector") or ())
    out["rdma"] = resources(values.get("rdma") or ())
    return out
