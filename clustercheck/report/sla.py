"""SLA evidence: for every judged metric, the spec value, the threshold and where it came from, the
measured value with its spread over iterations, the sizes, and the environment. Built from the run
record only; written as sla.json and shown as a section of report.html."""

from __future__ import annotations

from typing import Any, Sequence

from clustercheck.record.statement import ATTESTATION, VERIFY_CHECKS, versions
from clustercheck.record.schema import EndEntry, ResultEntry, RunHeader, item_id

SLA_SCHEMA = 1
_SPREAD = ("iter_us_min", "iter_us_median", "iter_us_max")


def spread(r: Any, v: Any) -> dict[str, float] | None:
    """min/median/max of the metric over timed iterations at the judged size, or None when the record
    holds no per-iteration times. Bandwidths scale as 1/time from the headline value (same bytes)."""
    judged = [row for row in r.get("rows") or [] if row.get("size") == r.get("judged_at")]
    row = next((x for x in judged if all(k in x for k in _SPREAD)), None)
    if row is None or not row.get("time_us"):
        return None
    t_min, t_med, t_max = (float(row[k]) for k in _SPREAD)
    if v["metric"] in ("time_us",) and v["unit"] == "us":
        return {"min": t_min, "median": t_med, "max": t_max, "iterations": len(row.get("iter_us") or [])}
    if v["metric"] in ("busbw", "algbw") and t_min > 0:
        scale = float(v["measured"]) * float(row["time_us"])  # value x time is constant for fixed bytes
        return {"min": scale / t_max, "median": scale / t_med, "max": scale / t_min,
                "iterations": len(row.get("iter_us") or [])}
    return None


def evidence(header: RunHeader, results: Sequence[ResultEntry], end: EndEntry | None) -> dict[str, Any]:
    checks = []
    for r in results:
        sizes = (r.get("params") or {}).get("sizes") or sorted({row["size"] for row in r.get("rows") or [] if "size" in row})
        entry: dict[str, Any] = {
            "id": item_id(r), "check": r["check"], "node": r.get("node"), "outcome": r["outcome"],
            "measure": r.get("measure"), "sizes": sizes, "judged_at": r.get("judged_at"),
            "iterations": (r.get("params") or {}).get("iters"), "worst": r.get("worst"),
            "defined_at": f"{r.get('suite_file')}:{r.get('line')}", "metrics": []}
        if not r.get("verdicts"):
            entry["message"] = r.get("message") or ""
        if r.get("notes"):
            entry["notes"] = list(r["notes"])  # what was not judged because the node has not got it
        for v in r.get("verdicts") or []:
            metric: dict[str, Any] = {
                # which GPU / pair / node / link the value is of: an item judges many, and the evidence must
                # name the one that failed (null where the item's value is the node's or the cluster's)
                "metric": v["metric"], "subject": v.get("subject"), "unit": v["unit"], "passed": v["passed"],
                "threshold": {"op": v["op"], "value": v["limit"], "expression": v["expression"],
                              "source": v.get("source") or "", "origin": v["origin"]},
                "spec": list(v.get("spec_sources") or []),
                "measured": v["measured"], "spread": spread(r, v), "margin": v["margin"]}
            if v.get("detail"):  # a probe's own one-line explanation of what it found
                metric["detail"] = v["detail"]
            entry["metrics"].append(metric)
        checks.append(entry)
    facts = header.get("facts") or {}
    return {
        "schema": SLA_SCHEMA, "platform": header.get("platform"), "platform_detected": header.get("platform_detected"),
        "started": header.get("started"), "finished": (end or {}).get("finished"), "complete": end is not None,
        "environment": {"facts": facts, "versions": facts.get("versions") or {}, "nodes": header.get("nodes"),
                        # what measured, as the signed statement names it: CUDA and NCCL as the ranks loaded them
                        "software": versions(header, results),
                        "launcher": header.get("launcher"), "backend": header.get("backend"),
                        "ranks": header.get("ranks")},
        "inputs": {"argv": header.get("argv"), "thresholds": header.get("thresholds"), "suites": header.get("suites")},
        "checks": checks,
    }


def signature(signer: str | None) -> dict[str, Any]:
    """Who signed the run (the key's fingerprint, `ssh-keygen -l` style) and what `clustercheck verify`
    checks; an unsigned run says so (docs/evidence.md)."""
    return {"signed_by": signer, "algorithm": "ed25519" if signer else None,
            "attestation": ATTESTATION if signer else None,
            "format": "a DSSE envelope around an in-toto Statement v1 (predicate test-result v0.1)",
            "verify": "clustercheck verify RUN --key PUBLIC_KEY", "verify_checks": list(VERIFY_CHECKS),
            "proves": "the holder of the signing key attests these files, unchanged since signing; their metrics "
                      "and verdicts follow from the recorded per-rank measurements and threshold profile",
            "does_not_prove": "that the measurements came from the hardware named: the signature binds the "
                              "signer's key, not the physical GPUs"}
