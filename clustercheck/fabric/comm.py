"""Which library moved the data, and what it says it did: the `comm` block of a collective's result.

gloo says nothing beyond its name. NCCL's ranks report what their debug logs said (see
measure/nccl_log.py): the version, the transports between each pair of ranks, whether NVLS
multicast is available, and, from the untimed tuning pass, the algorithm/protocol per size. This
module merges the ranks' reports into one block per item and labels NVLS as the report shows it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from clustercheck.fabric.nccl_net import HostNet

NCCL_LOG_MODES = ("full", "init", "off")
NCCL_LOG_HELP = ("NCCL's own account of each GPU collective: 'full' logs NCCL's init (version, transports) in the "
                 "timed pools and runs each collective once more in an untimed sibling pool that logs which "
                 "algorithm and protocol NCCL chose per size; 'init' skips the sibling pool (less GPU memory and "
                 "time); 'off' logs nothing (default: full)")


def describe(backend: str, per_rank: list[dict[str, Any]], ranks_info: list[dict[str, Any]],
             tuned: list[dict[str, Any]] | None, env: dict[str, str], tuning_error: str = "") -> dict[str, Any]:
    """The comm block for one item from its ranks' results (timed pass, and tuning pass when run)."""
    if backend != "nccl":
        return {"library": backend}
    named = ranks_info if len(ranks_info) == len(per_rank) else [{}] * len(per_rank)
    logs = [_as_node(r["nccl"], info.get("host")) for r, info in zip(per_rank, named) if r.get("nccl")]
    read = [log for log in logs if log.get("log")]
    versions = sorted({i["nccl"] for i in ranks_info if i.get("nccl")} |
                      {v.split("+")[0] for log in read for v in log["versions"]})
    out: dict[str, Any] = {
        "library": "nccl", "version": ", ".join(versions) or None,
        "transports": sorted({t for log in read for t in log["transports"]}),
        "shm_between_gpus": any(log["shm_between_gpus"] for log in read),
        "networks": sorted({n for log in read for n in log["networks"]}),
        "logs": [log["log"] for log in read],
    }
    errors = [{**e, "host": info.get("host") or e.get("host") or "", "rank": i}
              for i, (r, info) in enumerate(zip(per_rank, named)) for e in (r.get("nccl") or {}).get("errors") or ()]
    if errors:  # the warnings and error returns NCCL printed (fabric/transport.py)
        out["nccl_errors"] = errors
    shm = [{"rank": i, "host": info.get("host") or ""} for i, (r, info) in enumerate(zip(per_rank, named))
           if (r.get("nccl") or {}).get("shm_between_gpus")]
    if shm:  # ranks whose NCCL connected GPUs of their host through shared memory, not P2P (expectation p2p)
        out["shm_ranks"] = shm
    unread = [{"rank": i, "host": info.get("host") or "", "why": r["nccl"]["unread"]}
              for i, (r, info) in enumerate(zip(per_rank, named)) if (r.get("nccl") or {}).get("unread")]
    if unread:  # ranks whose own log was never read: what NCCL said of their GPUs and NICs is unknown
        out["unread_logs"] = unread
    if not read:
        out["why_not"] = next((log["why_not"] for log in logs if log.get("why_not")), "no NCCL log was read")
    net = merged_net(read)
    if net:
        out["net"] = {host: found.as_dict() for host, found in net.items()}
        out["nccl_env"] = {k: v for log in read for k, v in (log.get("env") or {}).items()}
    capable = [log["nvls_capable"] for log in read if log["nvls_capable"] is not None]
    algos = algorithms(tuned)
    out["algorithms"] = algos
    out["nvls"] = nvls_label(env, read[0]["env"] if read else {}, any(capable) if capable else None, algos)
    if tuning_error:
        out["tuning_error"] = tuning_error
    return out


def _as_node(log: dict[str, Any], node: str | None) -> dict[str, Any]:
    """One rank's network facts under the node name the run gave the rank. NCCL prints the machine's
    hostname, which need not be the node a verdict and the exclusion list name: a pod's name under
    Kubernetes, a short name where `--hosts` gave an address. A log naming several hosts is a capture, not
    one rank's account: its names stay."""
    net = log.get("net") or {}
    if not node or not net or len({h for h in net if h}) > 1:
        return log
    found = [HostNet.from_dict(raw) for raw in net.values()]
    merged = found[0]
    for other in found[1:]:
        merged = merged.merge(other)
    return {**log, "net": {node: replace(merged, host=node).as_dict()}}


def merged_net(read: list[dict[str, Any]]) -> dict[str, HostNet]:
    """Each host's network facts, the ranks' own accounts merged (fabric/nccl_net.py)."""
    out: dict[str, HostNet] = {}
    for log in read:
        for host, raw in (log.get("net") or {}).items():
            found = HostNet.from_dict(raw)
            out[host] = out[host].merge(found) if host in out else found
    return out


def algorithms(tuned: list[dict[str, Any]] | None) -> dict[str, str | None]:
    """`size/placement` -> NCCL's `algo/proto` for it (the group's first rank logs the choice)."""
    if not tuned:
        return {}
    out: dict[str, str | None] = {}
    for result in tuned:
        for row in result.get("rows") or []:
            key = _row_key(row)
            if out.get(key) is None:
                out[key] = row["algo"]
    return out


def nvls_label(check_env: dict[str, str], nccl_env: dict[str, str], capable: bool | None,
               algos: dict[str, str | None]) -> str:
    """`off (NCCL_NVLS_ENABLE=0)`, `used`, `available, not chosen`, `not available` or `unknown`."""
    setting = check_env.get("NCCL_NVLS_ENABLE", nccl_env.get("NCCL_NVLS_ENABLE"))
    if setting is not None and setting.strip() == "0":
        return "off (NCCL_NVLS_ENABLE=0)"
    if any(a and a.startswith("NVLS") for a in algos.values()):
        return "used"
    if capable:
        return "available, not chosen" if algos else "available"
    if capable is False:
        return "not available"
    return "unknown"


def tag_rows(rows: list[dict[str, Any]], algos: dict[str, str | None]) -> None:
    """Put NCCL's algo/proto on each per-size row it was logged for."""
    for row in rows:
        row["algo"] = algos.get(_row_key(row))


def _row_key(row: dict[str, Any]) -> str:
    return f"{row['size']}/{row['placement']}"


def line(comm: dict[str, Any]) -> str:
    """One line for reports: `NCCL 2.21.5 · transports P2P, NET/IB · NVLS used`."""
    if comm.get("library") != "nccl":
        return comm.get("library", "")
    parts = [f"NCCL {comm['version']}" if comm.get("version") else "NCCL"]
    if comm.get("transports"):
        parts.append("transports " + ", ".join(comm["transports"]))
    if comm.get("shm_between_gpus"):
        parts.append("SHM between GPUs (P2P broken?)")
    if comm.get("networks"):
        parts.append("network " + ", ".join(comm["networks"]))
    if comm.get("net"):
        from clustercheck.fabric.nccl_summary import summary

        parts.append(summary({h: HostNet.from_dict(v) for h, v in comm["net"].items()}, {}))
    parts.append(f"NVLS {comm.get('nvls', 'unknown')}")
    for why in ("why_not", "tuning_error"):
        if comm.get(why):
            parts.append(comm[why])
    return " · ".join(parts)
