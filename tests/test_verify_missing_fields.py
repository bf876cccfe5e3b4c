"""`clustercheck verify` against a key holder who edits what re-judging did not compare: a field deleted
from a verdict or a row (the record then says less than its evidence: a verdict without its source, a row
without its #wrong), a verdict's worst rank or detail, a row's label or per-rank list, the item's worst
subject. Each edit is re-signed as `clustercheck sign` signs (every digest and the signature hold) and must
come out NOT VERIFIED, naming the record line, the item and the field. The run is test_verify_forgery's
(gloo ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from test_verify_forgery import copy, lines_of, problems, resign, signed, verify, write_lines  # noqa: F401 (a fixture)

pytestmark = pytest.mark.pool

Edit = Callable[[dict[str, Any]], None]


def _pop(part: str, key: str) -> Edit:
    def edit(result: dict[str, Any]) -> None:
        for entry in result[part]:
            entry.pop(key)
    return edit


def _put(part: str, key: str, value: Any) -> Edit:
    def edit(result: dict[str, Any]) -> None:
        result[part][0][key] = value
    return edit


def _worst(result: dict[str, Any]) -> None:
    result["worst"] = "rank 0 (another-node)"


def _no_judged_at(result: dict[str, Any]) -> None:
    result.pop("judged_at")


# check -> (edit of its result line, what the problem line says after `evidence::CHECK[vm]: `)
CASES: dict[str, tuple[str, Edit, str]] = {
    "verdict source deleted": ("allreduce", _pop("verdicts", "source"), "missing from the record: source"),
    "verdict kind deleted": ("allreduce", _pop("verdicts", "kind"), "missing from the record: kind"),
    # no rank of the run is rank 7: which of ranks 0 and 1 was the slowest differs from run to run
    "verdict worst changed": ("allreduce", _put("verdicts", "worst", "rank 7 (vm)"), "differs in worst"),
    "verdict detail added": ("allreduce", _put("verdicts", "detail", "as the vendor measured"), "differs in detail"),
    "verdict field added": ("allreduce", _put("verdicts", "certified", True), "not re-derived: certified"),
    "row wrong deleted": ("allreduce", _pop("rows", "wrong"), "wrong is missing from the record (re-derived 0)"),
    "row label changed": ("allreduce", _put("rows", "placement", "elsewhere"), "placement recorded 'elsewhere'"),
    "row rank list changed": ("allreduce", _put("rows", "wrong_ranks", [0]), "wrong_ranks recorded [0]"),
    "row value added": ("allreduce", _put("rows", "certified", 1), "certified does not follow from the ranks'"),
    "worst changed": ("allreduce", _worst, "worst 'rank 0 (another-node)', re-derived 'rank "),
    "judged_at deleted": ("allreduce", _no_judged_at, "judged_at None B, re-derived"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_field_deleted_or_edited_and_re_signed_is_not_verified(signed: dict[str, Path], tmp_path: Path,
                                                                 case: str) -> None:
    check, edit, said = CASES[case]
    run = copy(signed, tmp_path)
    entries = lines_of(run)
    line = next(i for i, e in enumerate(entries) if e.get("type") == "result" and e["check"] == check)
    edit(entries[line])
    write_lines(run, entries)
    resign(run, signed["key"])
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    assert any(p.startswith(f"run.jsonl:{line + 1}: evidence::{check}[") and said in p for p in problems(proc)), \
        proc.stdout
