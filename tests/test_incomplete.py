"""A run that did not finish says INCOMPLETE in every report and exit code: SIGINT, a second SIGINT, SIGTERM
(what Slurm and Kubernetes send on a time-out), a killed controller; nodes nothing measured are listed as
untested. Real controller processes, real signals, real gloo ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import write_suite
from test_faults import RUN, _alive, _wait_for_results, assert_all_gone, rank_pids, record

CHECKS = "abcde"
THRESHOLDS = "platform: cpu\ndetect: {gpu_count: 0}\nchecks:\n" + "".join(
    f"  {c}: {{busbw: {{limit: '>= 0.000001', unit: GB/s}}}}\n" for c in CHECKS)


@pytest.fixture
def five(project: pytest.Pytester) -> pytest.Pytester:
    """A 5-check CPU suite whose third check hangs, so a signal always lands mid-run."""
    (project.path / "thresholds" / "cpu.yaml").write_text(THRESHOLDS)
    body = "".join(f"  - id: {c}\n    measure: all_reduce\n    timeout: 120\n    params: {{sizes: [1KiB], iters: 2}}\n"
                   for c in CHECKS)
    write_suite(project, "checks:\n" + body)
    return project


def _start(p: pytest.Pytester) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "pytest", "suites/s.yaml", *RUN, "--cc-inject-fault", "c:hang"],
                            cwd=p.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _interrupt(p: pytest.Pytester, *signals: signal.Signals) -> tuple[int, str]:
    proc = _start(p)
    try:
        _wait_for_results(p.path, 2)
        time.sleep(0.5)  # c is hanging now
        start = time.monotonic()
        for i, sig in enumerate(signals):
            if i:
                time.sleep(0.2)
            proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert time.monotonic() - start < 20, "stopping took too long"
    return proc.returncode, out.decode()


def _assert_incomplete(p: pytest.Pytester, rc: int, out: str, signame: str) -> None:
    assert rc == 2, out
    assert "Traceback (most recent call last)" not in out, out
    assert "INCOMPLETE: interrupted" in out and "3 of 5 planned item(s) not run" in out, out
    assert "exclude: none (no node failed a check)" not in out
    lines = record(p.path)
    assert lines[-1]["type"] == "end" and lines[-1]["interrupted"] is True and lines[-1]["signal"] == signame
    run = p.path / "out" / "latest"
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "INCOMPLETE" and data["incomplete"]["not_run"] == 3
    node = data["run"]["nodes"][0]
    assert data["incomplete"]["items"] == [f"s::{c}[{node}]" for c in "cde"]
    junit = ET.parse(run / "junit.xml").getroot()
    assert (junit.get("tests"), junit.get("errors"), junit.get("failures")) == ("6", "4", "0")  # and the run's
    errors = [c for c in junit.iter("testcase") if c.find("error") is not None]
    assert [e.find("error").get("message") for e in errors] == [f"not run: interrupted ({signame})"] * 3 + [
        f"INCOMPLETE: interrupted ({signame})"]
    html = (run / "report.html").read_text()
    assert 'class="banner incomplete"' in html and "3 of 5 planned item(s) not run" in html
    # which ones, by name: the banner's count alone leaves the reader to diff the plan against the results
    assert "<b>Planned and not run</b> (3): " + ", ".join(f"s::{c}[{node}]" for c in "cde") in html
    assert json.loads((run / "sla.json").read_text())["complete"] is False
    assert_all_gone(rank_pids(lines))


def test_sigint_is_incomplete_everywhere(five: pytest.Pytester) -> None:
    rc, out = _interrupt(five, signal.SIGINT)
    _assert_incomplete(five, rc, out, "SIGINT")


def test_a_second_sigint_stops_at_once_and_the_record_stays_whole(five: pytest.Pytester) -> None:
    rc, out = _interrupt(five, signal.SIGINT, signal.SIGINT)
    _assert_incomplete(five, rc, out, "SIGINT")


def test_sigterm_is_handled_like_sigint(five: pytest.Pytester) -> None:
    rc, out = _interrupt(five, signal.SIGTERM)
    _assert_incomplete(five, rc, out, "SIGTERM")


def test_report_on_a_record_without_an_end_line_says_incomplete_and_fails(five: pytest.Pytester) -> None:
    proc = _start(five)
    try:
        _wait_for_results(five.path, 2)
        proc.kill()  # no handler runs: the record has no end line
        proc.wait(10)
    finally:
        proc.kill()
    lines = record(five.path)
    assert lines[-1]["type"] == "result"
    assert_all_gone(rank_pids(lines))
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", "out/latest"], cwd=five.path,
                         capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert "INCOMPLETE: the run was killed before it ended" in out.stderr and "3 of 5" in out.stderr
    run = five.path / "out" / "latest"
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "INCOMPLETE" and data["incomplete"]["not_run"] == 3
    assert ET.parse(run / "junit.xml").getroot().get("errors") == "4"  # 3 not run, and the run INCOMPLETE
    ctrf = json.loads((run / "ctrf.json").read_text())["results"]
    assert [t["rawStatus"] for t in ctrf["tests"] if t["status"] == "failed"] == ["not run"] * 3 + ["incomplete"]


def test_a_node_whose_items_all_errored_is_untested_in_every_summary(project: pytest.Pytester,
                                                                     tmp_path: Path) -> None:
    """Two nodes through the hosts launcher; every item of h2 errors (its rank crashes), so h2 is untested."""
    (project.path / "thresholds" / "cpu.yaml").write_text(THRESHOLDS)
    write_suite(project, "checks:\n  - id: a\n    measure: all_reduce\n    params: {sizes: [1KiB], iters: 2}\n")
    textfile = tmp_path / "cc.prom"
    res = project.runpytest("suites/s.yaml", *RUN, "--launcher", "hosts", "--hosts", "h[1-2]",
                                       "--host-command", "env CC_HOST={host} {python}", "--cc-inject-fault",
                                       "a:crash@3", "-p", "clustercheck_prometheus",
                                       f"--prometheus-textfile={textfile}")
    assert res.ret == 3  # every item errored and none failed: a harness error (clustercheck.exitcodes)
    res.stdout.fnmatch_lines(["*untested: h2*"])
    run = project.path / "out" / "latest"
    data = json.loads((run / "results.json").read_text())
    assert data["untested"] == ["h2"] and data["verdict"] == "ERROR"
    assert record(project.path)[-2]["untested"] == ["h2"]  # the exclude line
    assert 'clustercheck_untested{node="h2"} 1.0' in textfile.read_text()
    assert "clustercheck_incomplete 0.0" in textfile.read_text()


def test_a_node_whose_items_were_all_skipped_makes_no_pass_though_the_others_passed(tmp_path: Path) -> None:
    from clustercheck.report import read
    from clustercheck.report.status import run_status

    def item(node: str, outcome: str) -> dict:
        return {"type": "result", "name": f"a[{node}]", "check": "a", "node": node, "nodes": [node],
                "measure": "all_reduce", "scope": "node", "suite_file": "suites/s.yaml", "line": 3,
                "outcome": outcome, "duration": 0.1, "verdicts": [],
                "message": "" if outcome == "passed" else f"all_reduce_perf is not on the PATH on {node}"}

    run = tmp_path / "run"
    run.mkdir()
    lines = [{"type": "run", "schema": 1, "started": "2026-01-01T00:00:00+00:00", "argv": ["clustercheck", "run"],
              "platform": "cpu", "facts": {"host": "n1"}, "thresholds": {"file": "thresholds/cpu.yaml", "sha256": "ab"},
              "suites": [], "nodes": ["n1", "n2"]},
             item("n1", "passed"), item("n2", "skipped"),
             {"type": "end", "finished": "2026-01-01T00:01:00+00:00", "counts": {}, "interrupted": False}]
    (run / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    status = run_status(read(run / "run.jsonl"))
    assert (status["verdict"], status["untested"]) == ("ERROR", ["n2"])  # PASS before: n2 was never measured
    out = subprocess.run([sys.executable, "-m", "clustercheck", "report", str(run)], capture_output=True, text=True)
    assert out.returncode == 3, out.stderr
    assert out.stderr == "untested: n2 (no item measured these nodes: they are not cleared; run verdict ERROR)\n"
    assert json.loads((run / "results.json").read_text())["verdict"] == "ERROR"
    sla = json.loads((run / "sla.json").read_text())
    assert (sla["verdict"], sla["untested"], sla["complete"]) == ("ERROR", ["n2"], True)  # no verdict key before
    junit = ET.parse(run / "junit.xml").getroot()  # 0 errors before
    assert (junit.get("tests"), junit.get("errors")) == ("3", "1")
    assert junit.find(".//testcase[@name='untested[n2]']/error").get("type") == "untested"
    ctrf = json.loads((run / "ctrf.json").read_text())["results"]  # failed 0 before
    assert ctrf["summary"]["failed"] == 1 and ctrf["tests"][-1]["rawStatus"] == "untested"


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_the_run_starts_is_incomplete_in_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    """`clustercheck run` signalled once its first ranks exist, before any check ran (pytest starting, the
    suites collected, or the ranks importing torch): exit 2 and a line saying INCOMPLETE and that nothing
    was measured; never a traceback or death by the signal, and no rank left behind."""
    proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (ranks := _children(proc.pid)) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert ranks, "no rank process appeared"
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, out
    assert "INCOMPLETE: " in out and "stopped before any check ran; nothing was measured" in out, out
    if sig == signal.SIGTERM:  # wherever it landed (pytest starting, collecting, ranks importing), it is named
        assert "INCOMPLETE: SIGTERM while the run was starting: stopped before" in out, out
    assert "Traceback (most recent call last)" not in out, out
    for pid in ranks:
        assert_all_gone([pid])


SIGNAL_IN_SPAWN = """
import os, sys
from pathlib import Path
from clustercheck import cli
from clustercheck.run import pool

started = pool.WorkerPool.spawn


def spawn(self):  # the signal lands after the zygote exists, before the first pool is handed on
    started(self)
    Path("children").write_text(Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text())
    raise KeyboardInterrupt


pool.WorkerPool.spawn = spawn
sys.exit(cli.main(["run", "cpu-smoke", "--out", "out"]))
"""


def test_a_signal_inside_the_first_pools_start_ends_its_zygote_with_the_run(tmp_path: Path) -> None:
    """A signal that lands while the first pool's ranks are being asked for (the zygote started, the pool
    not yet pending) is INCOMPLETE in one line, and the zygote is killed before the run exits. Left alone,
    it lived on until its torch import was done and it read the hang-up (seconds; over 10 s in a loaded CI
    run)."""
    out = subprocess.run([sys.executable, "-c", SIGNAL_IN_SPAWN], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "INCOMPLETE: " in out.stderr and "Traceback" not in out.stderr, out.stderr
    children = [int(pid) for pid in (tmp_path / "children").read_text().split()]
    assert children and not [pid for pid in children if _alive(pid)], "a zygote outlived the run"


def test_sigterm_while_the_suites_are_collected_is_named(tmp_path: Path) -> None:
    """SIGTERM that lands while pytest collects (a plugin sends it from its collection hook, so it lands
    there every time) says SIGTERM in the one INCOMPLETE line, as in every other phase, not "interrupted"."""
    (tmp_path / "sigterm_at_collection.py").write_text(
        "import os, signal\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", "-p",
                          "sigterm_at_collection"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "clustercheck: INCOMPLETE: SIGTERM while the run was starting: stopped before any check ran; nothing was "
        "measured and no node is cleared"), out.stderr
    assert "Traceback (most recent call last)" not in out.stdout + out.stderr


def test_a_signal_while_the_session_waits_for_its_first_pool_ends_the_zygote(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The session has taken the pool started before pytest and waits for its ranks (their zygote may still
    be importing torch) when SIGTERM arrives: the run says INCOMPLETE, and the zygote ends with the run
    instead of outliving it by its import (CI met it alive 10 s after the run)."""
    from clustercheck.run import prestart, zygote
    from helpers import clustercheck_here

    seen: list[zygote.Zygote] = []

    def signalled(self: prestart.Prestarted) -> None:
        seen.append(zygote._shared)  # type: ignore[arg-type]  # the zygote this pool's ranks came from
        raise KeyboardInterrupt("clustercheck: SIGTERM while the run was starting")

    monkeypatch.setattr(prestart.Prestarted, "ready", signalled)
    res = clustercheck_here("run", "cpu-smoke", "--out", "out", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "INCOMPLETE: SIGTERM while the run was starting: stopped before any check ran" in res.stderr
    assert seen and seen[0] is not None
    assert seen[0].proc.poll() is not None  # ended by the run, not left to finish its import
    assert zygote._shared is None
    # "leaves no record", as the line says: the run directory had its header and plan, and `latest` pointed
    # at it, a run no report would ever be rendered for
    assert not list((tmp_path / "out").glob("2*")) and not (tmp_path / "out" / "latest").is_symlink()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_option_pre_check_is_one_line(tmp_path: Path, sig: signal.Signals) -> None:
    """The pre-check of pytest's options (a `--` option given; it imports the -p plugins) ran before the
    handling was installed: SIGINT was a KeyboardInterrupt traceback, SIGTERM death by the signal (-15)."""
    marker = tmp_path / "importing"
    (tmp_path / "slow_plugin.py").write_text(f"import time\nopen({str(marker)!r}, 'w').close()\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "clustercheck", "run", "cpu-smoke", "--out", "out", "-p",
                             "slow_plugin", "--durations=1"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), proc.communicate()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, err
    why = "interrupted" if sig == signal.SIGINT else "SIGTERM while the run was starting"
    assert err.strip().splitlines() == [f"clustercheck: INCOMPLETE: {why}: stopped before any check ran; nothing "
                                        "was measured and no node is cleared"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("hook", ["pytest_terminal_summary", "pytest_unconfigure"])
def test_a_signal_during_the_summary_leaves_the_verdict_and_its_code(tmp_path: Path, hook: str) -> None:
    """terminal_summary gave the signals back before it wrote the summary: SIGINT there was 'INCOMPLETE:
    interrupted: stopped before any check ran; nothing was measured', exit 2, while results.json said PASS.
    After the session (pytest's unconfigure) the record's verdict and code stand too."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n  - id: a\n    measure: all_reduce\n    params: {sizes: [1KiB], iters: 2}\n")
    (tmp_path / "sigint_in_summary.py").write_text(
        "import os, signal, time\nimport pytest\n\n\n@pytest.hookimpl(trylast=True)\n"
        f"def {hook}():\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(0.5)\n")
    out = subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                          "-p", "sigint_in_summary"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["verdict"] == "PASS"
    assert out.returncode == 0, out.stdout + out.stderr
    assert "before any check ran" not in out.stderr and "Traceback" not in out.stdout + out.stderr


def _run_with_a_plugin_raising_at_end(tmp_path: Path, order: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`clustercheck run` of one small check with `-p raises_at_end`, whose sessionfinish (`order`: tryfirst,
    called before clustercheck's, or trylast, after it) raises RuntimeError('boom')."""
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(THRESHOLDS)
    (tmp_path / "s.yaml").write_text("checks:\n  - id: a\n    measure: all_reduce\n    params: {sizes: [1KiB], iters: 2}\n")
    (tmp_path / "raises_at_end.py").write_text(
        f"import pytest\n\n\n@pytest.hookimpl({order}=True)\ndef pytest_sessionfinish():\n    raise RuntimeError('boom')\n")
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", "s.yaml", "--thresholds", "th", "--out", "out",
                           "-p", "raises_at_end", *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_another_plugins_sessionfinish_that_raises_leaves_the_record_whole(tmp_path: Path) -> None:
    """A sessionfinish called before clustercheck's (tryfirst, registered later; LogXML with a path it could
    not write) raised, and the record never got its end line: no report, and `report` said INCOMPLETE."""
    out = _run_with_a_plugin_raising_at_end(tmp_path, "tryfirst")
    assert out.returncode != 0, out.stdout + out.stderr  # a harness error, never a pass
    lines = [json.loads(x) for x in (tmp_path / "out" / "latest" / "run.jsonl").read_text().splitlines()]
    assert lines[-1]["type"] == "end", lines[-1]
    assert json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["verdict"] == "PASS"


def test_the_users_own_junitxml_says_incomplete(five: pytest.Pytester) -> None:
    """SIGINT after 2 of 5 checks: the user's --junitxml had only the 2 passed testcases, errors="0", a green
    CI panel (the run directory's own junit.xml said INCOMPLETE)."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "suites/s.yaml", *RUN, "--cc-inject-fault", "c:hang",
                             "--junitxml=user.xml"], cwd=five.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for_results(five.path, 2)
        time.sleep(0.5)  # c is hanging now
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 2, out.decode()
    suite = ET.parse(five.path / "user.xml").getroot().find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props.get("clustercheck_verdict") == "INCOMPLETE"
    errors = {c.get("name"): c.find("error") for c in suite.iter("testcase") if c.find("error") is not None}
    assert {"c[vm]", "d[vm]", "e[vm]", "run"} <= set(errors), errors
    assert "INCOMPLETE: " in (errors["run"].text or "")
    assert int(suite.get("errors") or 0) >= 4 and suite.get("tests") == str(2 + len(errors))


@pytest.mark.parametrize(("fault", "verdict", "code"), [((), "PASS", 3), (("--cc-inject-fault", "a:corrupt"), "FAIL", 1)])
def test_a_plugins_sessionfinish_that_raises_after_clustercheck_never_hides_the_runs_verdict(
        tmp_path: Path, fault: tuple[str, ...], verdict: str, code: int) -> None:
    """A sessionfinish called after clustercheck's raised: pytest's INTERNALERROR traceback and exit 3, even for a
    FAIL run (3 says "nothing failed"). Now one line naming the plugin's file, and the worse of the run's code and 3."""
    out = _run_with_a_plugin_raising_at_end(tmp_path, "trylast", *fault)
    assert json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["verdict"] == verdict
    assert out.returncode == code, out.stdout + out.stderr
    assert "INTERNALERROR" not in out.stdout + out.stderr and "Traceback" not in out.stdout + out.stderr
    assert "clustercheck: ERROR: a plugin's pytest_sessionfinish raised (" in out.stderr, out.stderr
    assert "raises_at_end.py:6: RuntimeError: boom); the run's record and reports stand" in out.stderr, out.stderr


def test_a_run_pytest_itself_stopped_says_so_never_a_signal_that_never_came(five: pytest.Pytester) -> None:
    """pytest.exit from a conftest (as pdb's quit and `--sw`'s first failure stop a session) recorded
    "interrupted (SIGINT)" though no signal came: the reports now say pytest stopped it, and why."""
    (five.path / "conftest.py").write_text(
        "import pytest\n\n\ndef pytest_runtest_logreport(report):\n"
        "    if report.when == 'call':\n        pytest.exit('the conftest stops here')\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "suites/s.yaml", *RUN], cwd=five.path, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    reason = json.loads((five.path / "out" / "latest" / "results.json").read_text())["incomplete"]["reason"]
    assert "SIGINT" not in reason and "pytest stopped the session (the conftest stops here)" in reason, reason
