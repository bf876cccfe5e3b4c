"""The ranks' answers of one item, rebuilt from its `result` line, as its kind's judge read them during the
run: what `clustercheck verify` judges again. Where the rows already keep every rank's raw measurement
(the collectives: each rank's time per size; the per-GPU copy, memory, GEMM and burn kinds: each subject's
samples), the answers are rebuilt from the rows; the byte counts come from the suite's sizes and dtype by
nccl-tests' layout, never from the record. Every other kind keeps its answers in the result line
(`answers`, docs/run-record.md)."""

from __future__ import annotations

import math
from typing import Any, Mapping

from clustercheck import units
from clustercheck.formulas import PLACEMENTS, layout
from clustercheck.record.schema import ResultEntry, RunHeader
from clustercheck.kinds.base import CheckSpec

SUBJECT_KINDS = ("host_device", "device_memory", "host_memory", "gemm")
FROM_ROWS = frozenset((*PLACEMENTS, *SUBJECT_KINDS, "burn"))  # kinds whose rows hold the judge's input


class NotKept(ValueError):
    """The record does not hold what this item's judge needs (an older record, a row cut short)."""


def keeps_answers(measure: str) -> bool:
    """Whether a result line of this kind carries its ranks' answers (its rows do not hold them)."""
    return measure not in FROM_ROWS


def answers(r: ResultEntry, check: CheckSpec, header: RunHeader) -> list[dict[str, Any]]:
    """The per-rank answers of `r` as its kind's judge received them; NotKept when the record lacks them. A
    kind rebuilt from its rows is always rebuilt: an `answers` key on its line is never read (the byte counts
    it could carry would make any busbw; evidence/rejudge.py names such a line as a problem)."""
    if keeps_answers(check.measure):
        if "answers" in r:
            return list(r["answers"])
        raise NotKept(f"the record keeps no answers for measure {check.measure!r} (written before clustercheck "
                      f"kept them)")
    if check.measure in PLACEMENTS:
        return _collective(r, check)
    if check.measure in SUBJECT_KINDS:
        return _subjects(r)
    return _burn(r)


def hosts(r: ResultEntry, header: RunHeader, n: int) -> list[dict[str, Any]]:
    """Each rank's node, as the runner laid the item's ranks out: node by node, ranks_per_node each."""
    nodes = list(r.get("nodes") or header.get("nodes") or [])
    per = n // len(nodes) if nodes and n % len(nodes) == 0 else 0
    return [{"host": node} for node in nodes for _ in range(per)] if per else [{"host": "?"}] * n


def _collective(r: ResultEntry, check: CheckSpec) -> list[dict[str, Any]]:
    """Each rank's time per (size, placement) from `rank_time_us`; the layout (bytes, count, size) from the
    check's own sizes and dtype; per-iteration times from the slowest-rank series the record keeps."""
    rows = r.get("rows") or []
    params = check.params
    plan = [(size, placement) for size in params["sizes"] for placement in params["placements"]]
    if len(rows) != len(plan):
        raise NotKept(f"{len(rows)} row(s), but the suite's {len(params['sizes'])} size(s) x "
                      f"{len(params['placements'])} placement(s) make {len(plan)}")
    widths = {len(row.get("rank_time_us") or ()) for row in rows}
    if len(widths) != 1 or 0 in widths:
        raise NotKept("rows without a time for every rank (rank_time_us)")
    n = widths.pop()
    elt = units.DTYPE_BYTES[params["dtype"]]
    per_rank: list[dict[str, Any]] = [{"rows": [], "dtype": params["dtype"]} for _ in range(n)]
    for row, (size, placement) in zip(rows, plan):
        lay = layout(check.measure, size, elt, n)
        iters = [t / 1e6 for t in row.get("iter_us") or ()]
        # a NaN (a rank's `wrong` that was no count, kinds/collectives.py) stays NaN: judged again it fails again
        raw = row.get("wrong") or 0
        wrong = int(raw) if isinstance(raw, (int, float)) and math.isfinite(raw) else math.nan
        culprits = [i for i in row.get("wrong_ranks") or () if isinstance(i, int) and 0 <= i < n] or [0]
        for rank, seconds in enumerate(row["rank_time_us"]):
            per_rank[rank]["rows"].append({
                "size": lay.size, "count": lay.param_count, "bytes": lay.algbw_bytes, "placement": placement,
                "seconds": float(seconds) / 1e6, "iter_seconds": iters,
                # the row keeps the total and which ranks had any: the total is what every metric sums
                "wrong": wrong if rank == culprits[0] else 0})
    return per_rank


def _subjects(r: ResultEntry) -> list[dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for row in r.get("rows") or []:
        spread = {k: row[k] for k in ("median", "min", "max") if k in row}
        if "subject" not in row or "metric" not in row or "median" not in spread:
            raise NotKept("a row without subject, metric and median")
        found.setdefault(row["subject"], {})[row["metric"]] = {**spread, **_bus(row)}
    return [{"subjects": found}]


def _bus(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"bus_id": row["bus_id"]} if row.get("bus_id") else {}


def _burn(r: ResultEntry) -> list[dict[str, Any]]:
    out = []
    for row in r.get("rows") or []:
        if "wrong" not in row:
            raise NotKept("burn rows without each GPU's wrong count (written before clustercheck kept it)")
        out.append({"subject": row["subject"], "tflops": row["median"], "tflops_min": row["min"],
                    "tflops_max": row["max"], "bus_id": row.get("bus_id"), "host": row.get("host"),
                    "dtype": row.get("dtype"), "m": row.get("m"), "gemms": row.get("gemms"),
                    "checked": row.get("checked"), "seconds": row.get("seconds"), "watch": row.get("watch"),
                    "watch_error": None, "wrong": row["wrong"]})
    return out
