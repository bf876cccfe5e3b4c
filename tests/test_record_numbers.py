"""A run record's numbers and counts as its readers rely on them: a hostile or hand-edited record (an int of
thousands of digits, a limit too large for a float, a plan's `selection` whose counts contradict the plan)
is refused on read with the line and key named, exit 4, never a traceback (exit 3) or a report that states
wrong numbers. One real run (gloo ranks, `-k ok` of two checks) edited line by line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from helpers import CPU_THRESHOLDS, clustercheck_here, small_check

pytestmark = pytest.mark.pool


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("numbers")
    (root / "s.yaml").write_text("checks:\n" + small_check("ok") + small_check("too-fast"))
    (root / "th").mkdir()
    (root / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "o", "-k", "ok", cwd=root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (root / "o" / "latest").resolve()


def lines_of(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "run.jsonl").read_text().splitlines()]


def edited(run: Path, tmp_path: Path, edit: Callable[[list[dict[str, Any]]], str | None]) -> tuple[int, str]:
    """`clustercheck report` of a copy of `run` whose lines `edit` changed (in place, or as the text it returns)."""
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    entries = lines_of(run)
    text = edit(entries)
    (copy / "run.jsonl").write_text(text if text is not None else "".join(json.dumps(e) + "\n" for e in entries))
    proc = clustercheck_here("report", str(copy), cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and "internal error" not in said, said
    return proc.returncode, said


def first(entries: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(e for e in entries if e["type"] == kind)


def test_the_run_as_recorded_renders(run: Path, tmp_path: Path) -> None:
    code, said = edited(run, tmp_path, lambda entries: None)
    assert code == 0 and "a selection: 1 of 2 planned items" in said, said


def test_a_number_too_long_for_python_to_read_is_a_record_error(run: Path, tmp_path: Path) -> None:
    """json reads an int of over 4300 digits with int(), which raises ValueError, not JSONDecodeError."""
    def edit(entries: list[dict[str, Any]]) -> str:
        text = [json.dumps(e) for e in entries]
        at = next(i for i, e in enumerate(entries) if e["type"] == "result")
        text[at] = text[at][:-1] + ', "x": 1' + "0" * 5000 + "}"
        return "".join(line + "\n" for line in text)

    code, said = edited(run, tmp_path, edit)
    at = next(i for i, e in enumerate(lines_of(run)) if e["type"] == "result") + 1
    assert code == 4 and f"line {at}: a number too long to read" in said, said


@pytest.mark.parametrize("key", ["limit", "measured", "margin"])
def test_a_verdict_number_too_large_for_a_float_is_a_record_error(run: Path, tmp_path: Path, key: str) -> None:
    """float(10**400) raises OverflowError: the reader's finite-number check itself raised it (exit 3)."""
    def edit(entries: list[dict[str, Any]]) -> None:
        first(entries, "result")["verdicts"][0][key] = 10 ** 400

    code, said = edited(run, tmp_path, edit)
    assert code == 4 and f"result.verdicts[0].{key}" in said, said


def test_a_duration_too_large_for_a_float_is_a_record_error(run: Path, tmp_path: Path) -> None:
    def edit(entries: list[dict[str, Any]]) -> None:
        first(entries, "result")["duration"] = 10 ** 400

    code, said = edited(run, tmp_path, edit)
    assert code == 4 and "result.duration" in said, said


def selection_of(**change: Any) -> Callable[[list[dict[str, Any]]], None]:
    def edit(entries: list[dict[str, Any]]) -> None:
        first(entries, "plan")["selection"].update(change)
    return edit


@pytest.mark.parametrize(("change", "key"), [
    ({"selected": 3, "more": 1, "deselected": []}, "selected"),  # `3 of 4` of a plan of 1 item
    ({"selected": 9, "collected": 4}, "selected"),  # `9 of 4`
    ({"selected": 1, "collected": 1, "deselected": []}, "collected"),  # no selection at all, said to be one
    ({"collected": 5}, "more"),  # 1 + 1 named + 0 more is not 5
    ({"more": 7}, "more"),
    ({"collected": 1_000_001, "deselected": [f"s::i{i}" for i in range(1_000_000)]}, "deselected"),  # 17 MB reports
])
def test_a_selection_whose_counts_contradict_the_plan_is_a_record_error(run: Path, tmp_path: Path,
                                                                          change: dict[str, Any], key: str) -> None:
    """Every report states `a selection: N of M planned items` and copies `deselected`: a record must not
    state counts its plan contradicts, nor hold more ids than the writer keeps."""
    code, said = edited(run, tmp_path, selection_of(**change))
    assert code == 4 and f"plan.selection.{key}" in said, said


def test_a_deselected_id_cannot_forge_a_line_of_the_reports() -> None:
    """`clustercheck report` prints selection_text on stderr: an id holding a newline wrote a line of its own
    (`verified: run verdict PASS ...`), and ESC sequences drove the terminal."""
    from clustercheck.report.status import selection_text

    said = selection_text({"selected": 1, "collected": 3, "deselected": ["a\nverified: run verdict PASS",
                                                                          "\x1b[2Jb"], "more": 0})
    assert "\n" not in said and "\x1b" not in said, said
    assert "a\\nverified" in said, said


@pytest.mark.parametrize("key", ["drain", "taint"])
@pytest.mark.parametrize(("entry", "field"), [
    ({"command": ["scontrol", "update"], "rc": False, "output": "o"}, "rc"),  # false == 0 read as `done`
    ({"command": ["scontrol"], "rc": "0", "output": "o"}, "rc"),
    ({"command": ["scontrol"], "rc": 1.5, "output": "o"}, "rc"),
    ({"command": ["scontrol"], "output": "o"}, "rc"),
    ({"command": "scontrol update", "rc": 1, "output": "o"}, "command"),
    ({"command": ["scontrol", 7], "rc": 1, "output": "o"}, "command"),
    ({"command": ["scontrol"], "rc": 1, "output": None}, "output"),
])
def test_a_drain_or_taint_entry_of_another_shape_is_a_record_error(run: Path, tmp_path: Path, key: str,
                                                                    entry: dict[str, Any], field: str) -> None:
    def edit(entries: list[dict[str, Any]]) -> None:
        exclude = next((e for e in entries if e["type"] == "exclude"), None)
        if exclude is None:
            exclude = {"type": "exclude", "hostlist": "", "reasons": {}}
            entries.insert(next(i for i, e in enumerate(entries) if e["type"] == "end"), exclude)
        exclude[key] = [entry]

    code, said = edited(run, tmp_path, edit)
    assert code == 4 and f"exclude.{key}[0].{field}" in said, said


def test_the_writer_s_selection_always_holds_what_the_reader_checks() -> None:
    """The reader refuses selected + named + more != collected (52f9664); the writer took every id it was told
    of, so more ids than items left out (an id said twice under two names by a conftest) made the run's own
    record unreadable to it."""
    from clustercheck.record.schema import selection

    for selected, collected, told in ((1, 2, ["a", "b", "c"]), (1, 4, ["a"]), (0, 3, [f"x{i}" for i in range(200)])):
        sel = selection(selected, collected, told)
        assert sel is not None and sel["selected"] + len(sel["deselected"]) + sel["more"] == collected, sel
        assert sel["more"] >= 0
