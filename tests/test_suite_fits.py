"""A check whose parameters plan more time than its timeout gives one task (a burn's `duration` at or above its
timeout) could only end as 'a rank hung' (exit 3) after the whole timeout: it is refused at load, in one line
naming file, line and key, exit 4. The timeout is per task (run/pool.py), whatever --repeat or --duration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.paths import data_dir
from clustercheck.errors import UserError
from clustercheck.suite.load import is_suite_file, load_suite
from helpers import CPU_THRESHOLDS


def _load(tmp_path: Path, text: str) -> None:
    (tmp_path / "s.yaml").write_text(text)
    load_suite(tmp_path / "s.yaml", "s.yaml")


def _refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(UserError) as caught:
        _load(tmp_path, text)
    return str(caught.value)


def test_a_burn_longer_than_its_timeout_is_refused_naming_file_line_and_key(tmp_path: Path) -> None:
    said = _refused(tmp_path, "checks:\n  - id: b\n    measure: burn\n    timeout: 5\n    params:\n"
                              "      m: 256\n      duration: 30\n")
    assert said == ("s.yaml:7: checks[0].params.duration: 30 s of load does not fit timeout 5 s (line 4); "
                    "raise timeout")


@pytest.mark.parametrize(("text", "said"), [
    # the load alone as long as the timeout: the operands, known answer and warm-up come on top
    ("checks:\n  - id: b\n    measure: burn\n    timeout: 8\n    params: {duration: 8}\n",
     "s.yaml:5: checks[0].params.duration: 8 s of load does not fit timeout 8 s (line 4); raise timeout"),
    # the default duration (60 s) against the suite's default timeout
    ("defaults:\n  timeout: 60\nchecks:\n  - id: b\n    measure: burn\n",
     "s.yaml:4: checks[0].params.duration: 60 s of load does not fit timeout 60 s (defaults.timeout, line 2); "
     "raise timeout"),
])
def test_a_burn_at_its_timeout_is_refused_wherever_either_comes_from(tmp_path: Path, text: str, said: str) -> None:
    assert _refused(tmp_path, text) == said


@pytest.mark.parametrize("text", [
    "checks:\n  - id: b\n    measure: burn\n    timeout: 8\n    params: {duration: 7.5}\n",
    "checks:\n  - id: b\n    measure: burn\n",  # 60 s of load, 300 s of timeout
    "checks:\n  - id: g\n    measure: gdsio\n    timeout: 100\n    params: {gpus: 4, duration: 10}\n",  # 80 s of 90
    "checks:\n  - id: i\n    measure: ib_write_bw\n    timeout: 16\n",  # 5 s of 6
])
def test_what_fits_its_timeout_loads(tmp_path: Path, text: str) -> None:
    _load(tmp_path, text)


def test_native_tools_must_fit_the_tools_share_of_the_timeout(tmp_path: Path) -> None:
    """The rank ends gdsio and ib_write_bw within 0.9 of the timeout (or 10 s less), each run its share."""
    said = _refused(tmp_path, "checks:\n  - id: g\n    measure: gdsio\n    timeout: 80\n    params: {gpus: 4, duration: 10}\n")
    assert said == ("s.yaml:5: checks[0].params.duration: 10 s does not fit timeout 80 s: 8 gdsio run(s) (write, read "
                    "on 4 GPU(s)) within 70 s of it for the tool (line 4); raise timeout")
    said = _refused(tmp_path, "checks:\n  - id: g\n    measure: gdsio\n    timeout: 20\n    params: {io: [read]}\n")
    assert "10 s does not fit timeout 20 s: 1 gdsio run(s) (read on one GPU, and as many more as the node has) " \
           "within 10 s of it" in said
    said = _refused(tmp_path, "checks:\n  - id: i\n    measure: ib_write_bw\n    timeout: 5\n")
    assert said == ("s.yaml:2: checks[0].params.duration: 5 s does not fit timeout 5 s: an ib_write_bw run per port "
                    "within 0.5 s of it for the tool (line 4); raise timeout")


def test_every_shipped_suite_still_loads() -> None:
    for path in sorted(data_dir("suites").glob("*.yaml")):
        if is_suite_file(path):
            load_suite(path)


def test_run_refuses_it_in_one_line_exit_4(tmp_path: Path) -> None:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n  - id: b\n    measure: burn\n    timeout: 5\n    params: {duration: 30}\n")
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "o"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 4 and out.stdout == "", out.stdout + out.stderr
    assert out.stderr.strip().splitlines() == [
        "clustercheck: error: s.yaml:5: checks[0].params.duration: 30 s of load does not fit timeout 5 s (line 4); "
        "raise timeout"]
