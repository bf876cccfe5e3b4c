"""`clustercheck report` on a record whose node names are hostile text: what it prints about the nodes
is escaped (no ESC or BEL reaches the terminal) and a name that cannot be a hostlist is said as a comma
list, never a traceback; the exit code is the verdict's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from test_html_report_items import HEADER, _plan, _result

from clustercheck.exitcodes import for_verdict

OSC = "n\x1b]52;c;aGk=\x07\x1b[2J"  # writes the clipboard, clears the screen


def _report(tmp_path: Path, lines: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)


@pytest.mark.parametrize("bad", [OSC, "n[1", "a,b", "x]"])
def test_an_untested_node_with_a_hostile_name_is_escaped_never_a_traceback(tmp_path: Path, bad: str) -> None:
    proc = _report(tmp_path, [{**HEADER, "nodes": ["n1", bad]}, _result("ok"),
                              {"type": "end", "finished": "2026-01-01T00:01:00+00:00"}])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stderr
    assert proc.stderr.startswith("untested: ") and "run verdict ERROR" in proc.stderr, proc.stderr
    assert proc.returncode == for_verdict("ERROR")


def test_an_incomplete_run_line_escapes_a_node_that_never_joined(tmp_path: Path) -> None:
    proc = _report(tmp_path, [{**HEADER, "nodes": ["n1", OSC], "absent": {OSC: "no agent \x1b[31m"}},
                              _plan("ok", "b"), _result("ok")])
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stderr
    assert "INCOMPLETE" in proc.stderr and "never joined" in proc.stderr, proc.stderr
    assert proc.returncode == for_verdict("INCOMPLETE")
