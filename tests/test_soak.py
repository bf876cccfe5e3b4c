"""benchmarks/soak.py's judging, without a soak: a sample it could not read fails (never RSS 0 or fds -1,
which read healthy), and --rejudge judges what the CSV keeps of the session's end (leftover processes,
pool starts, pytest's exit code, checks in error), never a PASS without them."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[1] / "benchmarks" / "soak.py"


@pytest.fixture(scope="module")
def soak():
    spec = importlib.util.spec_from_file_location("soak_bench", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _samples(n: int = 12, **change) -> list[dict]:
    out = [{"t_s": float(t), "controller_rss_mib": 100.0, "controller_fds": 20, "controller_threads": 4,
            "rank_pids": [11, 12], "rank_rss_mib": [200.0, 200.0], "rank_fds": [30, 30], "children": 2,
            "descendants": 2, "workers_ours": 2, "workers_machine": 2, "checks_done": t} for t in range(n)]
    for key, value in change.items():
        out[-2][key] = value
    return out


def _rejudge(soak, tmp_path: Path, capsys, samples: list[dict], session: dict | None) -> tuple[int, str]:
    path = tmp_path / "soak.csv"
    if session is None:  # a CSV as the soak wrote it before it kept the session's end
        with path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=soak.FIELDS)
            w.writeheader()
            for s in samples:
                w.writerow({k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in s.items()})
    else:
        soak.write_csv(path, samples, session)
    code = soak.rejudge(path, 0.0, 2)
    return code, capsys.readouterr().out


def test_an_unreadable_proc_file_is_no_value(soak) -> None:
    gone = 2**22 + 12345  # above any pid_max default: no such process
    assert soak.rss_mib(gone) is None and soak.fd_count(gone) is None and soak.threads(gone) is None


@pytest.mark.parametrize("change", [{"controller_rss_mib": None}, {"controller_fds": None},
                                    {"rank_fds": [30, None]}, {"rank_rss_mib": [None, 200.0]},
                                    {"controller_threads": None}])
def test_a_sample_that_could_not_be_read_fails(soak, change) -> None:
    _, problems = soak.judge(_samples(**change), 0.0, 11.0, [], 1, 2)
    assert any("could not be read" in p for p in problems), problems


def test_rejudge_judges_the_session_end_the_csv_keeps(soak, tmp_path, capsys) -> None:
    clean = {"leftover": [], "pool_starts": 1, "exit_code": 0, "errors": 0}
    code, out = _rejudge(soak, tmp_path, capsys, _samples(), clean)
    assert code == 0 and "VERDICT: PASS" in out
    code, out = _rejudge(soak, tmp_path, capsys, _samples(),
                         {"leftover": [4242], "pool_starts": 2, "exit_code": 3, "errors": 1})
    assert code == 1 and "VERDICT: FAIL" in out
    for said in ("processes left after the session: [4242]", "2 pool starts", "pytest exit code 3",
                 "1 check(s) ended in error"):
        assert said in out, out
    code, out = _rejudge(soak, tmp_path, capsys, _samples(controller_fds=None), clean)
    assert code == 1 and "controller fds (/proc/self/fd) could not be read in 1 sample(s)" in out
    code, out = _rejudge(soak, tmp_path, capsys, _samples(), None)
    assert code == 1 and "VERDICT: FAIL" in out and "not judged" in out
