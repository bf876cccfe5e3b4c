"""The terminal table fits 100 columns with long check ids, node names and GPU subjects, and a failure reason
is never cut: one that does not fit wraps, whole, onto continuation lines under the verdict column."""

from __future__ import annotations

from typing import Any

from clustercheck.report.terminal import WIDTH, summary_lines

NODE = "gpu-node-rack17-slot42.cluster.example.internal"
REASON = ("rank 3 on " + NODE + " died with NCCL error 5 (unhandled system error): socket closed by peer "
          "10.17.42.3:34567 after 30.0 s; the ranks before it waited in all_reduce at 256 MiB")


def _verdict(subject: str | None, metric: str, measured: float, limit: float, passed: bool) -> dict[str, Any]:
    return {"subject": subject, "metric": metric, "measured": measured, "unit": "GB/s", "op": ">=", "limit": limit,
            "passed": passed, "margin": (measured - limit) / limit}


def _results() -> list[dict[str, Any]]:
    return [
        {"name": f"nvlink-bidirectional-all-pairs[{NODE}]", "outcome": "failed",
         "verdicts": [_verdict("GPU1<->GPU2", "bidirectional", 601.0, 670.0, False),
                      _verdict("GPU7->GPU6", "unidirectional", 335.5, 335.0, True)]},
        {"name": f"allreduce-sweep-large-messages[{NODE}]", "outcome": "error", "message": REASON + "\ntraceback"},
        {"name": "x" * 130, "outcome": "skipped", "message": "one rank"},
        {"name": "h2d-d2h[node7]", "outcome": "failed", "verdicts": [_verdict("GPU4", "h2d", 26.1, 50.0, False)]},
    ]


def test_the_widest_line_fits_100_columns() -> None:
    lines = summary_lines(_results())
    assert max(len(line) for line in lines) <= WIDTH == 100
    assert max(len(line) for line in lines) > 90  # the long cells did need the room: the test measures something


def test_a_failure_reason_wraps_whole_under_its_verdict() -> None:
    lines = summary_lines(_results())
    at = next(i for i, line in enumerate(lines) if line.endswith("ERROR:"))
    continuation = [line for line in lines[at + 1:] if line.startswith(" ") and not line.strip().startswith("-")]
    words = " ".join(continuation).split()
    assert " ".join(words[:len(REASON.split())]) == REASON  # every word, in order, nothing cut
    indents = {len(line) - len(line.lstrip()) for line in continuation[:3]}
    assert len(indents) == 1 and indents <= {4, lines[0].index("verdict")}  # one block, its own lines


def test_a_long_check_id_is_whole_on_its_own_line_and_the_row_continues_in_its_columns() -> None:
    lines = summary_lines(_results())
    name = f"nvlink-bidirectional-all-pairs[{NODE}]"
    at = lines.index(name)
    assert lines[at + 1].split()[:3] == ["GPU1<->GPU2", "bidirectional", "601"]
    assert lines[at + 1].index("GPU1") == lines[0].index("metric") and lines[at + 1].endswith("FAIL")
    assert lines[at + 2].split()[:2] == ["GPU7->GPU6", "unidirectional"]  # its next verdict: no second id line
    assert "".join(line.split()[0] for line in lines if line.startswith("x")) == "x" * 130  # wrapped, not cut
    assert lines[lines.index("x" * WIDTH) + 1].split()[1:] == ["SKIPPED:", "one", "rank"]  # spans the empty cells


def test_short_rows_stay_one_line_each() -> None:
    short = [{"name": "h2d-d2h[node7]", "outcome": "failed", "verdicts": [_verdict("GPU4", "h2d", 26.1, 50.0, False)]},
             {"name": "b", "outcome": "error", "message": "rank 0 died"}]
    lines = summary_lines(short)
    assert len(lines) == 3 and lines[2].endswith("ERROR: rank 0 died")
    assert summary_lines(_results())[-2].endswith("SKIPPED: one rank")  # a short reason keeps its line
    assert lines[1].split()[:3] == ["h2d-d2h[node7]", "GPU4", "h2d"]
