"""The rows a collective's ranks answer, checked before they are paired by position: every rank one row per
(size, placement), in one order, each with a time. The collectives' judge (kinds/collectives.py) and the
localization's groups (localize/drive.py) read them alike: a row they cannot pair is the harness's
problem, never a reading."""

from __future__ import annotations

import math
from typing import Any, Sequence

from clustercheck import units
from clustercheck.errors import HarnessError, show


def check_rows(per_rank: list[dict[str, Any]], hosts: Sequence[str],
               expected: Sequence[tuple[int, str]] | None = None, where: str = "") -> None:
    """Every rank answered one row per (size, placement), in one order: rank 0's, and the suite's sizes x
    placements when given (sizes as the ranks' layout reports them). The rows are paired by position: a rank
    short of a row, or with its rows in another order, would pair one size's time with another's (zip() cut
    the longer short), so it is a HarnessError naming the rank and its host (`where`: the check, first)."""
    at = f"{where}: " if where else ""

    def keys(i: int) -> list[tuple[Any, Any]]:
        rows = per_rank[i].get("rows") if isinstance(per_rank[i], dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise HarnessError(f"{at}rank {i} ({host(i)}) answered no rows ({show(rows, 40)})")
        return [(r.get("size"), r.get("placement")) for r in rows]

    def host(i: int) -> str:
        return hosts[i] if i < len(hosts) else "no host"

    def text(rows: Sequence[tuple[Any, Any]]) -> str:
        shown = [f"{units.format_size(z) if isinstance(z, int) else show(z, 20)} {p}" for z, p in rows[:6]]
        return ", ".join(shown) + (f" ... ({len(rows)} rows)" if len(rows) > 6 else "") if rows else "none"

    if not per_rank:
        raise HarnessError(f"{at}no rank answered")
    want = list(expected) if expected is not None else keys(0)
    if not want:
        raise HarnessError(f"{at}rank 0 ({host(0)}) answered no rows: nothing measured")
    for i in range(len(per_rank)):
        got = keys(i)
        if got != want:
            raise HarnessError(f"{at}rank {i} ({host(i)}) answered rows for {text(got)}; "
                               f"{'the suite asks' if expected is not None else 'rank 0 answered'} {text(want)}: "
                               f"its times cannot be paired with the other ranks', not judged")
        for r in per_rank[i]["rows"]:  # True read as 1 s; a NaN, 0 or negative time made a NaN busbw, failed
            if not units.is_number(r.get("seconds")) or not (math.isfinite(r["seconds"]) and r["seconds"] > 0):
                raise HarnessError(f"{at}rank {i} ({host(i)}) answered {show(r.get('seconds'), 40)} s for "
                                   f"{text([(r.get('size'), r.get('placement'))])}: no time (a broken timer), not judged")
