"""Run every probe on this machine: the node-health suite before it is wired into `clustercheck run`."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.probes import NAMES, get, run_live
from clustercheck.probes.base import ProbeOutcome, ProbeVerdict


def run_node_health(expect: Mapping[str, Any]) -> list[tuple[str, str, tuple[ProbeVerdict, ...] | str]]:
    """(probe name, outcome, verdicts or the skip/error reason) for every probe, live, in a fixed order."""
    out: list[tuple[str, str, tuple[ProbeVerdict, ...] | str]] = []
    for name in NAMES:
        result = outcome_of(name, expect)
        out.append((name, result.outcome, result.verdicts if result.outcome in ("passed", "failed", "not judged") else result.reason))
    return out


def outcome_of(name: str, expect: Mapping[str, Any]) -> ProbeOutcome:
    try:
        probe = get(name)
    except Exception as exc:  # an import error in one probe must not stop the others
        return ProbeOutcome(name, "error", reason=f"{type(exc).__name__}: {exc}")
    return run_live(probe, expect)
