"""--counters end to end on real gloo ranks: each node's counters and kernel log are read around every
check, and an event fails exactly the item whose window held it (issue 17, acceptance 2). The event is a
real kernel log record: an Xid line written to /dev/kmsg (root only) while the second of three checks
runs; the readers themselves are tested on captured trees and logs in tests/test_counters*.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import one_kernel_log, small_check, write_suite

KMSG = Path("/dev/kmsg")
XID = "clustercheck-test: NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


def _results(run: Path) -> list[dict]:
    try:
        lines = [json.loads(x) for x in (run / "run.jsonl").read_text().splitlines() if x.strip()]
    except (OSError, json.JSONDecodeError):
        return []
    return [x for x in lines if x.get("type") == "result"]


def _run_logging(project: pytest.Pytester, faults: list[str], xids: dict[int, str]) -> tuple[dict[str, dict], str]:
    """Run suites/s.yaml with --counters and the faults, writing xids[k] to /dev/kmsg once k results are
    recorded (the k+1-th check's window is then open); each item's result by check, and the run's output."""
    out = project.path / "out"
    with one_kernel_log():
        return _run_logged(project, out, faults, xids)


def _run_logged(project: pytest.Pytester, out: Path, faults: list[str], xids: dict[int, str]
                ) -> tuple[dict[str, dict], str]:
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "suites/s.yaml",
                             "--thresholds", "thresholds", "--cc-out", str(out), "--cc-counters",
                             *[a for f in faults for a in ("--cc-inject-fault", f)]],
                            cwd=project.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while xids:
            done = len(_results(out / "latest")) if (out / "latest").exists() else 0
            if done in xids:
                KMSG.write_text(xids.pop(done) + "\n")
            assert time.monotonic() < deadline and proc.poll() is None, "the checks never got that far"
            time.sleep(0.05)
        stdout = proc.communicate(timeout=300)[0].decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
    return {r["check"]: r for r in _results(out / "latest")}, stdout


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(KMSG, os.W_OK), reason="writing /dev/kmsg needs root")
def test_an_xid_logged_during_one_check_fails_that_item_and_no_other(project: pytest.Pytester):
    write_suite(project, "checks:\n" + "".join(small_check(c) for c in ("ok", "too-fast", "ok2")))
    th = project.path / "thresholds" / "cpu.yaml"
    th.write_text(th.read_text().replace("  too-fast:\n    busbw: {limit: \">= 1000000\"",
                                         "  too-fast:\n    busbw: {limit: \">= 0.000001\"")
                  + "  ok2:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n")
    out = project.path / "out"
    # the middle check's ranks wait 2 s; the Xid is written once the first check's window is closed
    results, stdout = _run_logging(project, ["too-fast:delay"], {1: XID})
    assert {c: r["outcome"] for c, r in results.items()} == {"ok": "passed", "too-fast": "failed", "ok2": "passed"}, stdout
    (xid,) = [v for v in results["too-fast"]["verdicts"] if v["metric"].startswith("kernel.xid")]
    assert xid["metric"] == "kernel.xid.79" and xid["measured"] == 1 and not xid["passed"]
    assert xid["subject"].endswith("0000:3b:00") and XID in xid["detail"]
    assert not [v for r in (results["ok"], results["ok2"]) for v in r["verdicts"] if v["metric"].startswith("kernel")]
    assert (out / "latest" / "exclude.txt").read_text().strip()  # the node whose GPU logged an Xid is excluded


@pytest.mark.skipif(os.geteuid() != 0 or not os.access(KMSG, os.W_OK), reason="writing /dev/kmsg needs root")
def test_an_xid_during_a_skipped_or_errored_item_fails_it_and_excludes_its_node(project: pytest.Pytester):
    """An item that judged nothing of its own (a probe that does not apply here: skipped; a rank that hung:
    an error) still had a window, and an Xid in it is the hardware failing while the item ran. Both items
    threw their windows away, so the run read PASS (the skip) or a bare error, and excluded no node."""
    write_suite(project, "checks:\n" + small_check("ok") + "  - id: nv\n    measure: probe\n    params: {probe: nvlink}\n"
                + small_check("hung", timeout="2"))  # it hangs: the 2 s are waited out whole
    with (project.path / "thresholds" / "cpu.yaml").open("a") as th:
        th.write("  hung:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"any working loopback\"}\n")
    out = project.path / "out"
    xids = {1: XID, 2: XID.replace("0000:3b:00", "0000:5e:00")}  # one in nv's window, one in hung's
    results, stdout = _run_logging(project, ["nv:delay", "hung:hang@1"], xids)
    assert {c: r["outcome"] for c, r in results.items()} == {"ok": "passed", "nv": "failed", "hung": "failed"}, stdout
    for check, pci, why in (("nv", "0000:3b:00", "skipped: "), ("hung", "0000:5e:00", "error: ")):
        own, *windows = results[check]["verdicts"]
        assert own["metric"] == "measurement" and own["measured"] == "not judged" and not own["passed"]
        assert own["detail"].startswith(why), own
        (xid,) = [v for v in windows if v["metric"] == "kernel.xid.79"]
        assert xid["subject"].endswith(pci) and not xid["passed"]
    assert (out / "latest" / "exclude.txt").read_text().strip()  # the node whose GPU fell off the bus


def test_a_profiles_counters_block_sets_allowances_and_a_mistake_names_file_line_and_key(tmp_path: Path):
    from clustercheck.errors import UserError
    from clustercheck.judging.thresholds import load_profile

    base = "platform: p\ndetect: {gpu_count: 0}\ncounters:\n"
    (tmp_path / "p.yaml").write_text(base + "  kernel.xid.43: {allow: 5, source: \"our jobs raise Xid 43 on purpose\"}\n")
    profile = load_profile(tmp_path / "p.yaml")
    assert profile.counters["kernel.xid.43"].allowed(60) == 5 and "kernel.xid" in profile.counters  # over the built-ins
    (tmp_path / "p.yaml").write_text(base + "  kernel.xid.43: {allow: lots, source: \"x\"}\n")
    with pytest.raises(UserError, match=r"p.yaml:4: counters.kernel.xid.43.allow: expected a count"):
        load_profile(tmp_path / "p.yaml")


@pytest.mark.pool
@pytest.mark.skipif(os.geteuid() != 0 or not os.access(KMSG, os.W_OK), reason="writing /dev/kmsg needs root")
def test_a_check_that_ends_in_a_harness_error_closes_its_window_so_the_next_is_not_blamed(tmp_path: Path):
    """Check b's answers fail verification (a forged result in the store, as tests/test_pool.py forges one):
    a HarnessError, not a RankFailure. Its window used to stay open, so the Xid logged during b failed the
    next check, c. Now b's window closes with the error, which names the Xid, and c's window is clean."""
    from clustercheck.counters.allowances import Judgement
    from clustercheck.errors import HarnessError
    from clustercheck.judging.windows import item_verdicts
    from clustercheck.kinds.base import CheckSpec
    from clustercheck.run import wire
    from clustercheck.run.options import Options
    from clustercheck.run.pool import PoolKey
    from clustercheck.run.pools import PoolManager
    from clustercheck.run.runner import Layout, Runner
    from test_pool import PARAMS, _client

    with one_kernel_log():  # its Xid would land in another worker's --counters window, and theirs in its
        pools = PoolManager(tmp_path / "logs")
        try:
            pool = pools.get(PoolKey("gloo", 2))
            host = pool.ranks[0]["host"]
            options = Options(None, [], 2, "gloo", tmp_path / "out", faults={"b": ("hang", 1, None)}, counters=True)
            runner = Runner(pools, options, Layout("gloo", [host], 2))
            check = {c: CheckSpec(c, "all_reduce", "node", dict(PARAMS), (), 60, "", "s.yaml", 1) for c in "abc"}
            runner.run(check["a"], {})
            assert item_verdicts("a", runner.windows, [host]) == []
            KMSG.write_text(XID + "\n")  # after a's window closed: in b's
            intruder = _client(pool.store.port)
            for rank in range(2):  # b's task is the pool's next; rank 1 hangs, so only the forgery answers for it
                intruder.set(wire.result_key(pool.seq + 1, rank), wire.seal("not-the-pool-key", {"ok": True, "result": {}}))
            intruder.set(wire.complete_key(pool.seq + 1), "1")
            with pytest.raises(HarnessError, match="failed verification") as raised:
                runner.run(check["b"], {})
            assert "counters in the check's window: " in str(raised.value) and "kernel.xid.79 on 0000:3b:00 rose by 1" \
                in str(raised.value)
            runner.run(check["c"], {})
            window = runner.windows[host]
            assert isinstance(window, Judgement) and not window.findings and not window.errors
        finally:
            pools.close(kill=True)


def test_what_a_node_has_not_got_is_said_in_the_record_and_every_report(project: pytest.Pytester):
    """A counter source this machine lacks (no GPU driver, no InfiniBand, no AER statistics: whatever a
    snapshot taken here calls absent) is not judged and not an error, and every report says so, per item;
    before, the notes stopped at the window and a counter that was never read was silence."""
    import socket

    from clustercheck.counters.snapshot import take

    absent = take().notes
    if not absent:
        pytest.skip("this machine has every counter source the readers know")
    write_suite(project, "checks:\n" + small_check("ok"))
    out = project.path / "out"
    with one_kernel_log():
        res = project.runpytest("-p", "no:cacheprovider", "suites/s.yaml", "--thresholds", "thresholds",
                                "--cc-out", str(out), "--cc-counters")
    res.assert_outcomes(passed=1)
    (result,) = _results(out / "latest")
    host = socket.gethostname()
    said = f"{host}: counters not judged, not on this hardware: {absent[0]}"
    assert result["notes"] == [f"{host}: counters not judged, not on this hardware: {note}" for note in absent]
    res.stdout.fnmatch_lines([f"note: {said}"])
    run = out / "latest"
    assert f"note: {said}" in (run / "junit.xml").read_text()
    assert f">{said}</li>" in (run / "report.html").read_text()  # styled as an error: it says "not judged" (bc831d0)
    (ctrf,) = json.loads((run / "ctrf.json").read_text())["results"]["tests"]
    assert ctrf["extra"]["clustercheck.item"]["notes"] == result["notes"]
    (sla,) = json.loads((run / "sla.json").read_text())["checks"]
    assert sla["notes"] == result["notes"]


def test_one_note_of_many_nodes_is_said_once_with_their_hostlist():
    from clustercheck.counters.allowances import Judgement
    from clustercheck.judging.windows import window_notes
    from clustercheck.judging.windows import NOT_HERE
    from clustercheck.report.terminal import notes

    no_ib, no_ecc = "no InfiniBand devices (/sys/class/infiniband absent)", "GPU0: no ECC"
    windows = {f"n{i}": Judgement(f"n{i}", 1.0, (), (), (no_ib,) + ((no_ecc,) if i < 3 else ())) for i in range(1, 5)}
    windows["n5"] = "no counter snapshot from n5 after the check"  # an error (item_verdicts), never a note
    assert window_notes(windows, ["n1", "n2", "n3", "n4", "n5"]) == (f"n[1-4]: {NOT_HERE}: {no_ib}",
                                                                     f"n[1-2]: {NOT_HERE}: {no_ecc}")
    # the run's end says each note once, over every item that carried it
    items = [{"notes": [f"n[1-2]: {no_ib}"]}, {"notes": [f"n[3-4]: {no_ib}", "n1: GPU0: no ECC"]}]
    assert notes(items) == [f"n[1-4]: {no_ib}", f"n1: {no_ecc}"]  # type: ignore[arg-type]
    assert notes([{"notes": [f"n{i}: note {i}"]} for i in range(8)], most=5)[-1] == "and 3 more (report.html, each item)"  # type: ignore[misc]


def test_a_check_that_errored_whole_fails_the_items_whose_window_failed_and_only_while_it_is_theirs(tmp_path):
    """A harness error of the whole check (its answers failed verification, its pool could not start) was
    every item's error, with the Xid only in the message: the node that logged it was never excluded. The
    windows count only when they are the check's own (a Skip before any rank ran leaves the previous
    check's windows in place)."""
    from types import SimpleNamespace

    from clustercheck.run.launcher import Launcher

    from clustercheck.counters.allowances import DEFAULTS, Judgement, judge
    from clustercheck.counters.delta import Delta, Increase
    from clustercheck.errors import HarnessError
    from clustercheck.judging.measurement import Outcome
    from clustercheck.kinds.base import CheckSpec
    from clustercheck.run.options import Options
    from clustercheck.run.session import CheckSession

    check = CheckSpec("b", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 3)
    xid = judge(Delta("n1", 5.0, (Increase("kernel.xid.79", "0000:3b:00", 0, 1, lines=(XID,)),), ()), DEFAULTS)
    quiet = Judgement("n2", 5.0, (), ())
    for windows_of, n1 in (("b", "failed"), ("a", "error")):
        session = CheckSession.__new__(CheckSession)
        session.options = Options(None, [], 2, "gloo", tmp_path, counters=True)
        session.nodes, session.baseline, session.over = ["n1", "n2"], None, None
        session.launcher = Launcher()  # the local launcher: its plane never ends, no node is absent
        session.runner = SimpleNamespace(windows={"n1": xid, "n2": quiet}, windows_of=windows_of,
                                         live=lambda: ["n1", "n2"])  # type: ignore[assignment]
        session._cache = {check.where: HarnessError("b: answers failed verification; counters in the check's window: ...")}
        got = {}
        for node in ("n1", "n2"):
            try:
                got[node] = session.measure(check, f"s::b[{node}]", node)
            except HarnessError:
                got[node] = "error"
        assert got["n2"] == "error"
        if n1 == "error":
            assert got["n1"] == "error"
            continue
        assert isinstance(got["n1"], Outcome)
        own, xid_verdict = got["n1"].verdicts
        assert own.detail == "error: b: answers failed verification; counters in the check's window: ..."
        assert xid_verdict.metric == "kernel.xid.79" and not xid_verdict.passed
