"""clustercheck.toolout.nccl_footer: the `Out of bounds values` footer judged by one rule in the text and
the -J JSON reader. nccl-tests writes FAILED (okay: false) exactly when values fell outside its tolerance:
the run fails naming the footer's line, as the JSON's failed out_of_bounds does, never a passed run."""

from __future__ import annotations

import json

import pytest

from clustercheck.probes import nccl_tests as probe
from clustercheck.toolout import nccl_tests as nt
from test_toolout_nccl_tests import _h100_lines, _json_doc

CLEAN = "# Out of bounds values : 0 OK"   # the real capture's footer line


def _with_footer(line: str) -> tuple[str, int]:
    lines = _h100_lines()
    at = lines.index(CLEAN)
    lines[at] = line
    return "\n".join(lines), at + 1


@pytest.mark.parametrize("footer, count", [("# Out of bounds values : 4 FAILED", 4),
                                           ("# Out of bounds values : 0 FAILED", 0),
                                           ("# Out of bounds values : 3 OK", 3),
                                           ("Out of bounds values : 2", 2)])
def test_a_failed_out_of_bounds_line_fails_the_run_naming_the_line(footer: str, count: int) -> None:
    text, line = _with_footer(footer)
    run = nt.parse(text)
    assert run.out_of_bounds == count and run.failure_kind == "failed" and run.failure_line == line
    assert run.failure is not None and run.failure.startswith(f"line {line}: {footer!r}")
    assert "a failed out-of-bounds check" in run.failure
    verdict = probe.run_verdict(run, "all_reduce_perf")
    assert not verdict.passed and verdict.detail.startswith(f"failed: line {line}:")


def test_the_clean_footer_passes_and_the_json_reader_fails_by_the_same_rule() -> None:
    text, _ = _with_footer(CLEAN)
    assert nt.parse(text).failure is None
    for count, okay in ((4, False), (0, False), (3, True)):
        doc = _json_doc()
        doc["out_of_bounds"] = {"count": count, "okay": okay}
        run = nt.parse(json.dumps(doc))
        assert run.failure_kind == "failed" and run.failure is not None
        assert "a failed out-of-bounds check" in run.failure
    doc = _json_doc()
    doc["out_of_bounds"] = {"count": 0}
    assert "no summary nccl-tests writes" in (nt.parse(json.dumps(doc)).failure or "")
