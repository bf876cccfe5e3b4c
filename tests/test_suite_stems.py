"""Two suite files of one stem in one run: items are `<stem>::<check id>[<where>]` (record/schema.item_id), so
a shared id makes two results one item's (JUnit's duplicate testcases, `a second result for s::x[...]` from
compare), and compare knows a suite by its stem alone. Both are refused before anything runs, exit 4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.suite.load import one_stem_each
from helpers import CPU_THRESHOLDS, small_check

RUN = ("--thresholds", "thresholds", "--cc-out", "out")


def _pair(root: Path, first: str, second: str) -> None:
    for folder, body in (("sa", first), ("sb", second)):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / "s.yaml").write_text("checks:\n" + body)


def _cc(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.mark.parametrize(("second", "said"), [
    (small_check("ok"), "clustercheck: error: suite files sa/s.yaml and sb/s.yaml are both named 's' and both have "
                        "check 'ok': its items would be one item (s::ok), reported twice and refused by compare; "
                        "rename one file"),
    (small_check("other"), "clustercheck: error: suite files sa/s.yaml and sb/s.yaml are both named 's': reports and "
                           "compare know a suite by its file's stem (s::<check id>), so their items would read as "
                           "one suite's; rename one file"),
])
def test_run_refuses_two_files_of_one_stem_in_one_line(tmp_path: Path, second: str, said: str) -> None:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    _pair(tmp_path, small_check("ok"), second)
    out = _cc(tmp_path, "run", "sa/s.yaml", "sb/s.yaml", "--thresholds", "th", "--out", "o")
    assert out.returncode == 4 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [said]
    assert not (tmp_path / "o" / "latest").exists()  # nothing ran, no record


def test_pytest_refuses_two_files_of_one_stem_before_any_item_runs(project: pytest.Pytester) -> None:
    _pair(project.path, small_check("ok"), small_check("ok"))
    res = project.runpytest("sa/s.yaml", "sb/s.yaml", *RUN)
    assert res.ret == 4
    res.stderr.fnmatch_lines(["*suite files sa/s.yaml and sb/s.yaml are both named 's' and both have check 'ok'*"])
    assert not (project.path / "out" / "latest").exists()


def test_one_file_named_twice_and_other_stems_are_not_refused(tmp_path: Path) -> None:
    _pair(tmp_path, small_check("ok"), small_check("ok"))
    (tmp_path / "sb" / "t.yaml").write_text("checks:\n" + small_check("ok"))
    a, b, t = tmp_path / "sa" / "s.yaml", tmp_path / "sb" / "s.yaml", tmp_path / "sb" / "t.yaml"
    one_stem_each([("sa/s.yaml", a, ["ok"]), ("sa/../sa/s.yaml", tmp_path / "sa" / ".." / "sa" / "s.yaml", ["ok"]),
                   ("sb/t.yaml", t, ["ok"])])
    with pytest.raises(UserError, match="sa/s.yaml and sb/s.yaml"):
        one_stem_each([("sa/s.yaml", a, ["ok"]), ("sb/t.yaml", t, ["ok"]), ("sb/s.yaml", b, ["x"])])
