"""clustercheck.probes.nccl_tests_rows: the rows against the sizes the header promises. A size listed twice
(a row copied over another) fails `table rows` naming both lines; the captures, whose per-rank collectives
print sizes below 16 B a rank as 0 more than once, have no such verdict."""

from __future__ import annotations

from clustercheck.probes import nccl_tests as probe
from clustercheck.toolout import nccl_tests as nt
from evidence import files, text

H100 = "allreduce-h100-2node-16rank-mpirun.txt"


def _row_of(lines: list[str], size: int) -> int:
    return next(i for i, s in enumerate(lines) if s.split()[:1] == [str(size)])


def test_a_size_listed_twice_fails_the_table_rows_naming_both_lines():
    lines = text("nccl-tests", H100).splitlines()
    at, copied = _row_of(lines, 2147483648), _row_of(lines, 4294967296)
    lines[at] = lines[copied]
    run = nt.parse("\n".join(lines))
    rows = [v for v in probe.judge(run, {}) if v.what == "table rows"]
    assert len(rows) == 1 and not rows[0].passed
    assert f"size 4294967296 B listed twice, lines {at + 1} and {copied + 1}" in rows[0].detail, rows[0].detail


def test_the_captures_have_no_table_rows_verdict():
    for name in files("nccl-tests"):
        run = nt.parse(text("nccl-tests", name.name))
        assert not [v for v in probe.judge(run, {}) if v.what == "table rows"], name
