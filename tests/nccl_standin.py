"""A real nccl-tests capture as `measure: nccl_tests` would have it printed on the node it judges: one
process over -g GPUs on that host. `measure: nccl_tests` refuses a table that is not the run it asked for
(kinds/nccl_tests.py not_asked), so a test that feeds it a capture of another cluster (16 ranks, one per
process, on two hosts) gives it this stand-in: the same rows, header and footer, its Rank lines moved to one
process on `host` (device = rank), the header's nGpus their count (a capture of one process keeps its
header and devices), and the argv that asks for that sweep and the header's nThread x nGpus."""

from __future__ import annotations

import re

from clustercheck.toolout import nccl_tests as reader

_RANK = re.compile(r"(Rank\s+)(\d+)((?:\s+Group\s+\d+)?\s+Pid\s+)(\d+)(\s+on\s+)\S+(\s+device\s+)\d+")
_GPUS = re.compile(r"(nThread 1 nGpus )\d+")


def one_node(text: str, host: str = "node7") -> str:
    """The capture with every Rank line in one process on `host`, and nGpus the number of Rank lines."""
    found = _RANK.findall(text)
    if len({pid for _, _, _, pid, _, _ in found}) == 1:  # one process already: only the host is another
        return _RANK.sub(lambda m: f"{m[1]}{m[2]}{m[3]}{m[4]}{m[5]}{host}{m[6]}{m[2]}", text)
    moved = _RANK.sub(lambda m: f"{m[1]}{m[2]}{m[3]}4242{m[5]}{host}{m[6]}{m[2]}", text)
    return _GPUS.sub(lambda m: f"{m[1]}{len(found)}", moved) if found else moved


def asked(text: str, binary: str = "all_reduce_perf") -> list[str]:
    """The argv (kinds/nccl_tests.py argv's flags) asking for the sweep, ranks, type and op the text printed."""
    run = reader.parse(text, binary)
    row = run.rows[0] if run.rows else None
    top = getattr(run, "reduced_from", None) or run.max_bytes or max((r.size for r in run.rows), default=8)
    return [binary, "-b", str(run.min_bytes or 8), "-e", str(top), "-f", str(run.step[0] if run.step else 2),
            "-g", str((run.n_threads or 1) * run.n_gpus if run.n_gpus else len(run.ranks) or 1), "-d", row.dtype if row else "float",
            "-o", (row.redop if row and row.redop not in (None, "none") else "sum")]
