"""A full disk names its cause: a write that fails stops the run at once as INCOMPLETE (exit 2), with one
line naming the file, the error and how many results the record holds; the ranks are ended, no temporary
file is left, and `clustercheck report` renders the reports later from what was recorded. Real full file
systems: a tmpfs of a few kilobytes, or one a filler fills while the run measures."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from helpers import cpu_profile, small_check

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

PROFILE = cpu_profile("""\
""") + "".join(f"  c{i}:\n    busbw: {{limit: '>= 0.000001', unit: GB/s, source: any}}\n" for i in range(6))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs under tmp_path (root only), unmounted whatever happens."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _start(cwd: Path, out: Path) -> subprocess.Popen[str]:
    (cwd / "thresholds").mkdir(exist_ok=True)
    (cwd / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (cwd / "s.yaml").write_text("checks:\n" + "".join(small_check(f"c{i}") for i in range(6)))
    return subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "thresholds",
                             "--out", str(out)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _resize(mount: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def _fill(mount: Path) -> None:
    """Write until the file system says it is full (unbuffered: nothing is left to flush on close)."""
    with (mount / "filler").open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError:
            pass


def test_the_record_filling_up_stops_the_run_incomplete_and_report_renders_it_later(small_disk: Path,
                                                                                   tmp_path: Path) -> None:
    proc = _start(tmp_path, small_disk / "out")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # fill the disk once the first result is recorded
        runs = list((small_disk / "out").glob("*/run.jsonl"))
        if runs and '"type": "result"' in runs[0].read_text():
            _fill(small_disk)
            break
        time.sleep(0.05)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2, out + err
    said = [ln for ln in err.splitlines() if "cannot write" in ln]
    assert len(said) == 1 and "run.jsonl: No space left on device; the record holds" in said[0], err
    assert "Traceback" not in out + err
    (run,) = (small_disk / "out").glob("2*")
    assert not [p.name for p in run.iterdir() if ".tmp" in p.name]  # no temporary file left
    pids = [int(p) for ln in (run / "run.jsonl").read_text().splitlines() if '"type": "pool"' in ln
            for p in json.loads(ln)["pids"]]
    assert pids and not [p for p in pids if Path(f"/proc/{p}").exists()]  # the ranks were ended
    recorded = sum('"type": "result"' in ln for ln in (run / "run.jsonl").read_text().splitlines())
    assert 1 <= recorded < 6 and f"the record holds {recorded} result(s)" in said[0]
    (small_disk / "filler").unlink()  # room again: the reports are rendered from what was recorded
    again = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    assert again.returncode == 2, again.stdout + again.stderr  # INCOMPLETE, as the run was
    summary = json.loads((run / "results.json").read_text())
    assert len(summary["results"]) == recorded and summary["incomplete"]


def test_reports_that_do_not_fit_leave_no_temporary_file_and_exit_2(small_disk: Path, tmp_path: Path) -> None:
    _resize(small_disk, "48k")  # the record and logs fit, the five reports beside them do not
    proc = _start(tmp_path, small_disk / "out")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2, out + err
    lines = [ln for ln in err.splitlines() if "cannot write the report" in ln]
    assert len(lines) == 1 and "No space left on device" in lines[0] and "clustercheck report" in lines[0], err
    assert "Traceback" not in out + err and "INCOMPLETE: the reports could not be written" in out
    (run,) = (small_disk / "out").glob("2*")
    assert not [p.name for p in run.iterdir() if ".tmp" in p.name]
    record = (run / "run.jsonl").read_text()
    assert sum('"type": "result"' in ln for ln in record.splitlines()) == 6 and '"type": "end"' in record
    roomy = tmp_path / "copy"
    shutil.copytree(run, roomy)
    again = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(roomy)], capture_output=True, text=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {p.name for p in roomy.iterdir()} >= {"results.json", "junit.xml", "report.html", "sla.json", "ctrf.json"}


def test_a_repeated_run_that_would_fill_the_disk_stops_after_its_first_repetition(small_disk: Path,
                                                                                   tmp_path: Path) -> None:
    _resize(small_disk, "256k")
    (tmp_path / "thresholds").mkdir()
    (tmp_path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "s.yaml").write_text("checks:\n" + small_check("c0"))
    run = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "thresholds",
                          "--out", str(small_disk / "out"), "--repeat", "500"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "stopping after repetition 1: repetition 1 wrote" in run.stderr and "more need about" in run.stderr
    (made,) = (small_disk / "out").glob("2*")
    end = [json.loads(ln) for ln in (made / "run.jsonl").read_text().splitlines() if '"type": "end"' in ln]
    assert end and end[0]["stopped"].startswith("repetition 1 wrote") and end[0]["repetitions"] == 1


def test_a_disk_full_before_the_first_check_is_one_line_and_leaves_no_stub(small_disk: Path, tmp_path: Path) -> None:
    """The run directory's first files (the inputs kept, the record's header) could not be written: an
    INTERNALERROR traceback, exit 3, and `latest` pointing at a directory holding half a record."""
    (small_disk / "out").mkdir()
    _fill(small_disk)
    proc = _start(tmp_path, small_disk / "out")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 4, out + err
    assert "Traceback" not in out + err and "INTERNALERROR" not in out + err
    (said,) = [ln for ln in (out + err).splitlines() if "No space left on device" in ln]
    assert f"--out {small_disk / 'out'}: cannot write " in said and said.endswith("; nothing was measured"), said
    assert list((small_disk / "out").iterdir()) == []  # no run directory, no `latest`
