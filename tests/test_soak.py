"""benchmarks/soak.py's judging, without a soak: a sample it could not read fails (never RSS 0 or fds -1,
which read healthy), and --rejudge judges what the CSV keeps of the session's end (leftover processes,
pool starts, pytest's exit code, checks in error), never a PASS without them. Each judgement can fail: a
leak, an extra process, a rank the controller does not own, a process left after the bounded wait. Ranks
are the pids the run record's pool line names (forked from the zygote, they are not the controller's
children); the zygote and the store are told apart by name.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
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
            "rank_pids": [11, 12], "ranks_ours": 2, "rank_rss_mib": [200.0, 200.0], "rank_fds": [30, 30],
            "children": 1, "descendants": 4, "zygotes": 1, "stores": 1, "extra": 0, "cc_machine": 4,
            "checks_done": t} for t in range(n)]
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


def test_a_healthy_session_passes(soak) -> None:
    lines, problems = soak.judge(_samples(), 0.0, 11.0, [], 1, 2)
    assert problems == [] and any("zygotes max 1" in line for line in lines), (lines, problems)


def test_a_leak_fails(soak) -> None:
    leaking = _samples()
    for i, s in enumerate(leaking):
        s["controller_rss_mib"] = 100.0 + 2.0 * i  # +2 MiB a sample: +22% over the run
        s["rank_rss_mib"] = [200.0, 200.0 + 1.5 * i]  # +6.5% by window: inside the band, but steady
    _, problems = soak.judge(leaking, 0.0, 11.0, [], 1, 2)
    assert any(p.startswith("controller RSS: a window median moved") for p in problems), problems
    assert any(p.startswith("controller RSS: grows steadily") for p in problems), problems
    assert any(p.startswith("rank 1 RSS (pid 12): grows steadily") for p in problems), problems
    assert not any(p.startswith("rank 0") for p in problems), problems
    grown = _samples()
    grown[-1]["controller_fds"] = 25
    grown[-1]["rank_fds"] = [31, 30]
    _, problems = soak.judge(grown, 0.0, 11.0, [], 1, 2)
    assert "controller fds grew from 20 to 25 (last 25)" in problems and "rank 0 fds grew from 30 to 31 (last 31)" in problems


@pytest.mark.parametrize("change, said", [
    ({"extra": 1}, "extra processes: up to 1 besides the ranks"),
    ({"zygotes": 2}, "2 zygote(s)"),
    ({"stores": 2}, "2 store(s)"),
    ({"ranks_ours": 1}, "a rank pid the record names is not a process of this controller in 1 sample(s)"),
    ({"rank_pids": [11, 13]}, "rank pids changed"),
])
def test_an_extra_or_strange_process_fails(soak, change, said) -> None:
    _, problems = soak.judge(_samples(**change), 0.0, 11.0, [], 1, 2)
    assert any(said in p for p in problems), problems


def test_one_rank_where_two_are_expected_fails(soak) -> None:
    one = _samples()
    for s in one:
        s.update(rank_pids=[11], ranks_ours=1, rank_rss_mib=[200.0], rank_fds=[30])
    _, problems = soak.judge(one, 0.0, 11.0, [], 1, 2)
    assert "1 rank processes after warm-up, expected 2" in problems


def test_leftover_processes_and_pool_restarts_fail(soak) -> None:
    _, problems = soak.judge(_samples(), 0.0, 11.0, [4242], 2, 2)
    assert "processes left after the session: [4242]" in problems
    assert any(p.startswith("2 pool starts") for p in problems), problems


def test_ranks_forked_from_the_zygote_are_ranks_not_extra(soak) -> None:
    """The process tree the zygote makes: controller -> cc-zygote -> 2 ranks and the store. A rank is known
    by the pid the record names, not by being the controller's child; anything else is extra."""
    table = {100: ("python", 1, 1), 200: ("cc-zygote", 100, 2), 201: ("python", 200, 3), 202: ("python", 200, 3),
             203: ("cc-store", 200, 3), 300: ("python", 1, 4)}
    got = soak.processes(100, [201, 202], table)
    assert got == {"children": 1, "descendants": [200, 201, 202, 203], "ranks_ours": 2, "zygotes": 1, "stores": 1,
                   "extra": 0, "cc_machine": got["cc_machine"]}
    table[204] = ("sleep", 202, 5)
    got = soak.processes(100, [201, 202, 300], table)  # 300 is not ours
    assert (got["ranks_ours"], got["extra"]) == (2, 1)


def test_the_record_names_the_ranks(soak, tmp_path) -> None:
    record = tmp_path / "run.jsonl"
    tail = soak.RecordTail(record)
    assert tail.read() == []  # not there yet
    record.write_text(json.dumps({"type": "start"}) + "\n" + json.dumps({"type": "pool", "pids": [7, 8]}) + "\n"
                      + '{"type": "pool", "pi')  # a line still being written is not read
    assert tail.read() == [7, 8] and tail.pool_starts == 1
    with record.open("a") as fh:
        fh.write('ds": [9, 10]}\n')
    assert tail.read() == [9, 10] and tail.pool_starts == 2


def test_a_process_still_there_after_the_bound_is_left_over(soak) -> None:
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    stays = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = {p.pid: soak._stat(p.pid)[2] for p in (quick, stays)}
        reaper = __import__("threading").Thread(target=quick.wait)  # the controller reaps its children
        reaper.start()
        left, waited = soak.wait_gone(started, 2.0)
        reaper.join()
        assert left == [stays.pid] and waited >= 2.0
        assert soak.wait_gone({stays.pid: started[stays.pid] + 1}, 1.0)[0] == []  # a reused pid is not ours
    finally:
        stays.kill()
        stays.wait()
    assert soak.wait_gone(started, 1.0)[0] == []


def test_rejudge_judges_until_the_loop_ended(soak, tmp_path, capsys) -> None:
    """Samples after the session (ranks gone, unreadable) are not judged: the CSV keeps where the loop ended."""
    samples = _samples(14)
    for s in samples[12:]:
        s.update(rank_rss_mib=[None, None], rank_fds=[None, None], ranks_ours=0, zygotes=0, stores=0)
    code, out = _rejudge(soak, tmp_path, capsys, samples,
                         {"leftover": [], "pool_starts": 1, "exit_code": 0, "errors": 0, "end_t": 11.0})
    assert code == 0 and "VERDICT: PASS" in out, out
