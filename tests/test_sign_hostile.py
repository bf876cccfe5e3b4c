"""`clustercheck sign` and `verify` on a real signed run whose record was edited into shapes no run writes
(valid JSON, the wrong type at some level): each is one line naming the record file, line and key, exit 4
for `sign` (bad input, as `report` refuses a record it cannot render) and 6 for `verify`, never a traceback
and exit 3 (an internal error). The run is test_verify_forgery's (gloo ranks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import clustercheck_here
from test_verify_forgery import copy, lines_of, problems, signed, verify, write_lines  # noqa: F401 (a fixture)

pytestmark = pytest.mark.pool

REPORTS = ("results.json", "sla.json", "junit.xml", "report.html", "ctrf.json", "attestation.json")


def _set(path: str, value: Any) -> Callable[[list[dict[str, Any]]], None]:
    """An edit of the run line: `path` its keys, dot-separated."""
    *parents, last = path.split(".")

    def edit(entries: list[dict[str, Any]]) -> None:
        at = entries[0]
        for key in parents:
            at = at.setdefault(key, {})
        at[last] = value

    return edit


# (the edit of the run line, the key sign names): each raised out of the statement's _node_identity
HEADERS = {
    "gpus text": (_set("facts.gpus", "x"), "run.facts.gpus: text, not a list of objects"),
    "a gpu text": (_set("facts.gpus", ["x"]), "run.facts.gpus[0]: text, not an object"),
    "node facts a list": (_set("node_facts.vm", ["x"]), "run.node_facts.vm: a list, not an object"),
    "node gpus text": (_set("node_facts.vm", {"gpus": "x"}), "run.node_facts.vm.gpus: text, not a list of objects"),
    "node identity text": (_set("node_facts.vm", {"identity": "x"}), "run.node_facts.vm.identity: text, not an object"),
    "node versions a list": (_set("node_facts.vm", {"versions": ["a"]}),
                             "run.node_facts.vm.versions: a list, not an object"),
}


@pytest.mark.parametrize("case", list(HEADERS))
def test_sign_refuses_a_header_no_run_writes_in_one_line(signed: dict[str, Path], tmp_path: Path, case: str) -> None:
    edit, said = HEADERS[case]
    run = copy(signed, tmp_path)
    entries = lines_of(run)
    edit(entries)
    write_lines(run, entries)
    before = {name: (run / name).read_bytes() for name in REPORTS}
    proc = clustercheck_here("sign", str(run), "--key", str(signed["key"]), cwd=tmp_path)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [f"clustercheck: error: {run / 'run.jsonl'}: not a run record clustercheck can "
                                        f"sign (line 1: {said}); reports left as they were"], proc.stderr
    assert {name: (run / name).read_bytes() for name in REPORTS} == before  # refused before anything was written
    proc = verify(run, signed["pub"])
    assert proc.returncode == 6 and "NOT VERIFIED" in proc.stdout.splitlines()[-1], proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert f"run.jsonl:1: its header makes no statement to compare attestation.json's with ({said}): not what a run " \
           f"writes" in problems(proc), proc.stdout
