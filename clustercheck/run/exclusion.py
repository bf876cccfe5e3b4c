"""The end of a run's exclusion list: exclude.txt beside the record, and, when asked, the nodes drained in
Slurm or tainted in Kubernetes, unless the breaker trips (record/exclude.py decides what is excluded and
holds the commands; this module acts on them for a session)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from clustercheck.record import exclude
from clustercheck.record.io import RecordWriteError, RunWriter
from clustercheck.record.schema import ExcludeEntry, ResultEntry
from clustercheck.run.options import Options


def write(run_dir: Path, record: RunWriter, results: list[ResultEntry], nodes: list[str], absent: Iterable[str],
          opts: Options) -> ExcludeEntry:
    """Write exclude.txt (Slurm hostlist syntax) and drain or taint if asked; the record's exclude line.
    A file that cannot be written marks the record broken (the run then reads INCOMPLETE)."""
    reasons = exclude.excluded(results)
    text = exclude.as_hostlist(list(reasons))
    try:
        (run_dir / "exclude.txt").write_text(text + "\n" if text else "")
    except OSError as exc:
        record.broken = f"cannot write {run_dir / 'exclude.txt'}: {exc.strerror or exc}"
        raise RecordWriteError(record.broken) from None
    out: ExcludeEntry = {"hostlist": text, "reasons": reasons, "drain": [], "unmeasured": exclude.unmeasured(results),
                         "untested": exclude.untested([*nodes, *absent], results)}
    acting = reasons and (opts.drain or opts.drain_dry_run or opts.taint or opts.taint_dry_run)
    if acting and (tripped := exclude.breaker(results, reasons, len(nodes), opts.drain_max)):
        out["breaker"] = tripped  # the verdicts and exclude.txt stand; nothing is drained
    elif acting:  # a node only its one failed pair listed is left alone (exclude.unproven), and said so
        lone = exclude.unproven(results)
        proven = {node: why for node, why in reasons.items() if node not in lone}
        if opts.drain or opts.drain_dry_run:  # a node an admin drained is left alone, and said so
            out["drain"] = exclude.drain(proven, dry_run=not opts.drain) + \
                exclude.spared(lone, exclude.drain_commands({n: reasons[n] for n in lone}))
        if opts.taint or opts.taint_dry_run:
            from clustercheck.run.k8s.taint import commands, taint

            out["taint"] = taint(proven, run_dir.name, dry_run=not opts.taint) + exclude.spared(
                lone, [commands(n, reasons[n], run_dir.name)[0] for n in lone])
    return out
