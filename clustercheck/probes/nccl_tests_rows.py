"""An nccl-tests table's rows against the sizes its header promises (minBytes to maxBytes by the step):
a row left out, repeated or moved is less than the run, or not the run."""

from __future__ import annotations

from clustercheck.probes.base import ProbeVerdict
from clustercheck.toolout.nccl_run import NcclTestsRun


def largest_promised(run: NcclTestsRun) -> int | None:
    """The last size of the sweep the header's minBytes, maxBytes and step promise (run.sizes_promised's loop)."""
    count = run.sizes_promised()
    if count is None or run.step is None or run.min_bytes is None:
        return None
    by, how = run.step
    return run.min_bytes * by ** (count - 1) if how == "factor" else run.min_bytes + by * (count - 1)


def _may_repeat(run: NcclTestsRun, size: int) -> bool:
    """Whether two sizes of the loop may print as one: collectives that split a size per rank print
    (size / ranks, aligned down to 16 B) x ranks (src/*.cu GetCollByteCount), so sizes below 16 B a rank print
    0, and a linear step under 16 B x ranks can print one size twice. A factor step >= 2 doubles the
    aligned count above 0, so no other size repeats there."""
    if size == 0:
        return True
    ranks = run.nranks
    return bool(run.step and run.step[1] == "bytes" and (ranks is None or run.step[0] < 16 * ranks)
                and run.collective not in ("all_reduce", "broadcast", "reduce", "sendrecv"))


def rows_verdict(run: NcclTestsRun, subject: str) -> ProbeVerdict | None:
    """The table's rows against the sizes its header promises, each sweep in strictly ascending order. Nothing
    to count for a run that is already failed (cut off), one whose author elided rows, or a header that does
    not say its step."""
    promised = run.sizes_promised()
    if promised is None or run.failure or not run.rows or any("elision" in n for n in run.notes):
        return None
    sizes = [r.size for r in run.rows]
    sweeps, extra = divmod(len(sizes), promised)
    problems = []
    if extra or not sweeps:
        problems.append(f"{len(sizes)} row(s), the header promises {promised} size(s) per sweep (minBytes "
                        f"{run.min_bytes} to maxBytes {run.max_bytes}, step {run.step[0] if run.step else '?'}"
                        f"({run.step[1] if run.step else '?'})): a row is missing or repeated")
    else:
        for k in range(sweeps):
            rows = run.rows[k * promised:(k + 1) * promised]
            back = next((i for i in range(1, len(rows)) if rows[i].size < rows[i - 1].size
                         or (rows[i].size == rows[i - 1].size and not _may_repeat(run, rows[i].size))), None)
            if back is None:
                continue
            row, before = rows[back], rows[back - 1]
            problems.append(f"size {row.size} B listed twice, lines {before.line} and {row.line}" if row.size == before.size
                            else f"size {row.size} B (line {row.line}) after {before.size} B: the sizes are out of order")
            break
    if not problems:
        return None
    return ProbeVerdict(subject, "table rows", False, "; ".join(problems), len(sizes), promised)
