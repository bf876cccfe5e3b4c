"""docs/run-record.md's `results.json` section names every top-level key a run's results.json has: `exclude`
and `selection` (report format 11) were written, read by gates, and documented nowhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import small_check, write_suite

DOC = Path(__file__).resolve().parent.parent / "docs" / "run-record.md"
RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")


def results_section() -> str:
    text = DOC.read_text()
    start = text.index("## `results.json`")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else len(text)]


@pytest.mark.parametrize("args", [("-k", "not other"), ("--repeat", "2")], ids=["selection-failed", "repeated"])
def test_every_top_level_key_of_results_json_is_documented(project: pytest.Pytester, args: tuple[str, ...]) -> None:
    """A run of a selection with a failed item (selection, exclude with a reason) and a repeated one (burn_in)."""
    write_suite(project, "checks:\n" + small_check("ok") + small_check("too-fast") + small_check("other"))
    project.runpytest("suites/s.yaml", *RUN, *args)
    doc = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    assert {"exclude", "selection" if args[0] == "-k" else "burn_in"} <= set(doc)
    named = set(re.findall(r"`([a-z_]+)`", results_section())) | set(re.findall(r'"([a-z_]+)":', results_section()))
    assert sorted(set(doc) - named) == []
