"""`run --expect KEY` that no check of the run reads: refused (one line, exit 4) before any check runs, as
`probe NAME --expect KEY` is (probes/cli.py). Run, such a key judges nothing and the run exits 0, and the user
takes the expectation for checked: the fail-closed rule. Each kind declares the keys its checks read
(`Kind.expect_keys`, `Kind.reads`); a profile's `expect:` block serves every kind and is never refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck.errors import UserError
from clustercheck.judging.expect import reads, typed_keys
from clustercheck.kinds.base import CheckSpec


def read_by(checks: Sequence[CheckSpec]) -> dict[str, list[str]]:
    """Each key the checks read -> the ids of the checks reading it, in the order of the checks."""
    from clustercheck.kinds import KINDS

    out: dict[str, list[str]] = {}
    for check in checks:
        for key in KINDS[check.measure].reads(check):
            ids = out.setdefault(key, [])
            if check.id not in ids:
                ids.append(check.id)
    return out


def refuse_unread(typed: Mapping[str, Any], selected: Sequence[CheckSpec], suite_files: Sequence[tuple[str, Path]]
                  ) -> None:
    """UserError for the first key of `typed` (the run's --expect) that no check of `selected` reads.
    `suite_files` ((as shown, path) of the selected checks' suites) are read again only then, to say that
    deselection (-k, -m, --deselect) left out the checks that read it."""
    from clustercheck.errors import escape

    keys = typed_keys(dict(typed))
    if not keys:
        return
    read = read_by(selected)
    for key in keys:
        if reads(list(read), key):
            continue
        these = f"the checks read: {', '.join(read)}" if read else "the checks read none"
        left_out = [i for k, ids in read_by(_collected(suite_files)).items() if reads([k], key) for i in ids]
        if left_out:
            raise UserError(f"--expect {escape(key)}: no check selected for this run reads it (deselected: "
                            f"{', '.join(dict.fromkeys(left_out))}; {these.replace('checks', 'selected checks')})")
        raise UserError(f"--expect {escape(key)}: no check of this run reads it ({these})")


def _collected(suite_files: Sequence[tuple[str, Path]]) -> list[CheckSpec]:
    """Every check of the suite files, as the collector read them (a file it read is read as well now)."""
    from clustercheck.suite.load import load_suite

    return [check for shown, path in suite_files for check in load_suite(Path(path), shown).checks]
