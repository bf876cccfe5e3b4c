"""`measure: nccl_tests` and `measure: nvbandwidth` end to end on a CPU machine: stand-in executables named
like the real tools print real captured output (tests/fixtures/tool-outputs/, without the two-line source
header) and exit with a chosen status; the argument list, the PATH lookup, the rank pool, the parsers,
the judging and the reports are the real ones."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import cpu_profile
from nccl_standin import asked, one_node

from clustercheck.errors import UserError
from clustercheck.suite.load import load_suite

FIXTURES = Path(__file__).parent / "fixtures" / "tool-outputs"
NCCL_PASS = FIXTURES / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"
NVB_PASS = FIXTURES / "nvbandwidth" / "h2d-memcpy-ce-8gpu-readme.txt"
NVB_P2P = FIXTURES / "nvbandwidth" / "d2d-memcpy-write-ce-8gpu-readme.txt"
NVB_CRASH = FIXTURES / "nvbandwidth-crashed" / "one-to-all-read-sm-8xl40s-aborted-core-dumped.txt"
RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider")
WRONG_ROW = ("     1048576        262144     float     sum      -1    203.2    5.16    9.68      0    207.2    5.06"
             "    9.49      0")


def captured(path: Path) -> str:
    """The tool's output as it printed it: the fixture minus its source line and the blank line after."""
    lines = path.read_text().split("\n")
    assert lines[0].startswith("# source:") and not lines[1].strip()
    return "\n".join(lines[2:])


def wrong_capture() -> str:
    """The passing H100 capture with 17 wrong elements at 1 MiB out-of-place (a real table, one cell edited)."""
    text = captured(NCCL_PASS)
    assert text.count(WRONG_ROW) == 1
    return text.replace(WRONG_ROW, WRONG_ROW.replace("9.68      0    207.2", "9.68     17    207.2"))


def standin(bin_dir: Path, name: str, cases: list[tuple[str, str, int]], stderr: str = "") -> Path:
    """An executable `name` that logs its argv and, for the first case whose key is in its argv ("" matches
    any), prints that output and exits with that status."""
    data = bin_dir / f"{name}.cases.json"
    data.write_text(json.dumps({"cases": cases, "stderr": stderr}))
    script = bin_dir / name
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys
        spec = json.load(open({str(data)!r}))
        open({str(bin_dir / (name + '.argv'))!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")
        args = " ".join(sys.argv[1:])
        for key, out, status in spec["cases"]:
            if key in args:
                sys.stdout.write(out)
                sys.stderr.write(spec["stderr"])
                sys.exit(status)
        sys.exit(99)
        """))
    script.chmod(0o755)
    return script


# -- at load: a suite chooses tool names and flags, never a program or a free-form argument --------------

def _load(tmp_path: Path, params: str, measure: str = "nccl_tests") -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"checks:\n  - id: n\n    measure: {measure}\n    params:\n{textwrap.indent(params, '      ')}")
    load_suite(path, "suites/s.yaml")


@pytest.mark.parametrize("params, message", [
    ('binary: "sh -c x"\n', "suites/s.yaml:5: checks[0].params.binary: 'sh -c x' is not an nccl-tests binary"),
    ("binary: /usr/local/bin/all_reduce_perf\n", "suites/s.yaml:5: checks[0].params.binary: "
                                                 "'/usr/local/bin/all_reduce_perf' is a path"),
    ("binary: rm\n", "suites/s.yaml:5: checks[0].params.binary: 'rm' is not an nccl-tests binary"),
    ('flags: "-x"\n', "suites/s.yaml:5: checks[0].params.flags: unknown key"),
    ("min_bytes: 1MiB\nmax_bytes: 1KiB\n", "suites/s.yaml:6: checks[0].params.max_bytes: must be >= min_bytes"),
    ("datatype: all\n", "suites/s.yaml:5: checks[0].params.datatype: must be one of"),
    ("gpus: 0\n", "suites/s.yaml:5: checks[0].params.gpus: must be between 1 and 64"),
])
def test_nccl_tests_parameters_are_refused_at_load_naming_file_line_and_key(tmp_path: Path, params: str,
                                                                          message: str) -> None:
    with pytest.raises(UserError) as info:
        _load(tmp_path, params)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("params, message", [
    ("binary: ./nvbandwidth\n", "checks[0].params.binary: './nvbandwidth' is a path"),
    ("testcases: [host_to_device]\n", "checks[0].params.testcases: 'host_to_device' is not an nvbandwidth "
                                      "testcase; did you mean host_to_device_memcpy_ce"),
    ("testcases: [multinode_bisect_write_ce]\n", "checks[0].params.testcases: 'multinode_bisect_write_ce' is not"),
    ("buffer_size: 1000000\n", "checks[0].params.buffer_size: nvbandwidth takes whole MiB"),
    ("testcases: ['-v']\n", "checks[0].params.testcases: '-v' is not an nvbandwidth testcase"),
])
def test_nvbandwidth_parameters_are_refused_at_load(tmp_path: Path, params: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        _load(tmp_path, params, "nvbandwidth")
    assert str(info.value).startswith("suites/s.yaml:5: " + message), str(info.value)


def test_the_argument_lists_carry_validated_values_only() -> None:
    from clustercheck.kinds.nccl_tests import argv as nccl_tests_argv, parse as nccl_tests_params
    from clustercheck.kinds.nvbandwidth import argv as nvbandwidth_argv, parse as nvbandwidth_params
    from clustercheck.schema import Fields

    nccl = nccl_tests_params(Fields({"min_bytes": "1MiB", "max_bytes": "1GiB", "check": 3}, "s.yaml", "p"))
    assert nccl_tests_argv(nccl, 8) == ["all_reduce_perf", "-b", "1048576", "-e", "1073741824", "-f", "2", "-g", "8",
                                        "-n", "20", "-w", "5", "-c", "3", "-d", "float", "-o", "sum"]
    with pytest.raises(UserError, match=r"check: 0 turns off nccl-tests' data check .* give 1 or more"):
        nccl_tests_params(Fields({"check": 0}, "s.yaml", "p"))  # a result nobody checked is never passed
    nvb = nvbandwidth_params(Fields({"testcases": ["device_local_copy"], "samples": 5}, "s.yaml", "p"))
    assert nvbandwidth_argv(nvb) == ["nvbandwidth", "-t", "device_local_copy", "-b", "512", "-i", "5"]


# -- the rank side: PATH lookup, timeout, bounded output ------------------------------------------------

def _ctx() -> object:
    import torch

    from clustercheck.measure import RankContext

    return RankContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=torch.device("cpu"), host="node7")


def test_a_hung_tool_is_stopped_with_its_children_and_what_it_printed_is_kept(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.measure.native import run_tool

    tool = tmp_path / "all_reduce_perf"
    pidfile = tmp_path / "child.pid"
    tool.write_text(f"#!{sys.executable}\nimport subprocess, sys, time\n"
                    f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                    f"open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
                    "print('# nThread 1 nGpus 1 minBytes 8 maxBytes 8', flush=True)\ntime.sleep(60)\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    t0 = time.monotonic()
    out = run_tool(_ctx(), ["all_reduce_perf", "-b", "8"], timeout=2.0)  # type: ignore[arg-type]
    assert time.monotonic() - t0 < 15
    assert out["outcome"] == "ran" and out["timed_out"] and out["returncode"] == -9
    assert out["stdout"].startswith("# nThread 1")
    child = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]


def test_output_is_bounded_and_a_missing_tool_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clustercheck.measure import native

    tool = tmp_path / "nvbandwidth"
    tool.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write('x' * 300000)\n"
                    "sys.stderr.write('e' * 100000 + 'LAST')\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(native, "STDOUT_LIMIT", 100000)
    out = native.run_tool(_ctx(), ["nvbandwidth"], timeout=30)  # type: ignore[arg-type]
    assert out["truncated"] and out["stdout_bytes"] == 300000 and len(out["stdout"]) == 100000
    assert len(out["stderr_tail"]) == native.STDERR_TAIL and out["stderr_tail"].endswith("LAST")
    gone = native.run_tool(_ctx(), ["sendrecv_perf"], timeout=30)  # type: ignore[arg-type]
    assert gone == {"host": "node7", "binary": "sendrecv_perf", "argv": ["sendrecv_perf"], "outcome": "missing",
                    "reason": "sendrecv_perf not found on PATH on node7"}


# -- end to end through the plugin ------------------------------------------------------------------

PROFILE = cpu_profile("""\
  nccl-pass:
    busbw: {limit: ">= 300", unit: GB/s, source: "the H100 capture's table: 337.35 GB/s in place at 8 GiB"}
    wrong: {limit: "<= 1000", unit: count, source: "a profile cannot relax the built-in wrong == 0"}
  nccl-wrong:
    busbw: {limit: ">= 300", unit: GB/s, source: "as nccl-pass"}
  nccl-missing:
    busbw: {limit: ">= 1", unit: GB/s, source: "never reached: no broadcast_perf here"}
  nccl-broken:
    busbw: {limit: ">= 1", unit: GB/s, source: "never reached: the tool prints nothing"}
  nccl-slow:
    busbw: {limit: ">= 400", unit: GB/s, source: "above the capture's 337.35 GB/s on purpose"}
  nvb-pass:
    host_to_device_memcpy_ce: {limit: ">= 25.9", unit: GB/s, source: "the README capture: 25.94 to 26.19 per GPU"}
    host_to_device_memcpy_ce_min_ratio: {limit: ">= 0.99", unit: ratio, source: "uniform within 1%"}
  nvb-crash:
    one_to_all_read_sm: {limit: ">= 1", unit: GB/s, source: "never judged: the run crashed"}
""", "test profile for the native tools")

SUITE = """\
checks:
  - id: nccl-pass
    measure: nccl_tests
    params: {min_bytes: 8, max_bytes: 8GiB, iters: 3, gpus: 16}
  - id: nccl-wrong
    measure: nccl_tests
    params: {binary: all_reduce_perf_mpi, min_bytes: 8, max_bytes: 8GiB, gpus: 16}
  - id: nccl-missing
    measure: nccl_tests
    params: {binary: broadcast_perf}
  - id: nccl-broken
    measure: nccl_tests
    params: {binary: sendrecv_perf}
  - id: nccl-slow
    measure: nccl_tests
    params: {min_bytes: 8, max_bytes: 8GiB, gpus: 16}
  - id: nvb-pass
    measure: nvbandwidth
    params: {testcases: [host_to_device_memcpy_ce]}
  - id: nvb-crash
    measure: nvbandwidth
    params: {testcases: [one_to_all_read_sm], samples: 1}
"""


def test_native_tools_run_through_the_pool_and_are_judged(project: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = project.path / "bin"
    bin_dir.mkdir()
    here = socket.gethostname()  # the 16 ranks of the capture as one process over -g 16 on this host
    standin(bin_dir, "all_reduce_perf", [("", one_node(captured(NCCL_PASS), here), 0)])
    standin(bin_dir, "all_reduce_perf_mpi", [("", one_node(wrong_capture(), here), 1)])  # exits 1 when #wrong > 0
    standin(bin_dir, "sendrecv_perf", [("", "", 127)],
            stderr="sendrecv_perf: error while loading shared libraries: libnccl.so.2: cannot open shared object file")
    standin(bin_dir, "nvbandwidth", [("one_to_all_read_sm", captured(NVB_CRASH), 134),
                                     ("host_to_device_memcpy_ce", captured(NVB_PASS), 0)])
    (project.path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (project.path / "suites" / "s.yaml").write_text(SUITE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = project.runpytest("suites/s.yaml", *RUN)
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "Traceback" not in out
    data = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    by_id = {r["check"]: r for r in data["results"]}
    assert {k: r["outcome"] for k, r in by_id.items()} == {
        "nccl-pass": "passed", "nccl-wrong": "failed", "nccl-missing": "skipped", "nccl-broken": "error",
        "nccl-slow": "failed", "nvb-pass": "passed", "nvb-crash": "failed"}

    ok = by_id["nccl-pass"]  # the busbw of the table's largest size, the worse (in-place) placement
    assert ok["metrics"]["busbw"] == {"value": 337.35, "unit": "GB/s"}
    assert ok["metrics"]["avg_busbw"]["value"] == 70.742 and ok["metrics"]["wrong"]["value"] == 0
    assert ok["judged_at"] == 8589934592 and ok["figure"] == "sweep"
    assert len(ok["rows"]) == 62 and {r["placement"] for r in ok["rows"]} == {"out", "in"}
    wrong = [v for v in ok["verdicts"] if v["metric"] == "wrong"]
    assert [(v["op"], v["limit"], v["origin"]) for v in wrong] == [("==", 0.0, "built in")]  # not the profile's
    argv = json.loads((bin_dir / "all_reduce_perf.argv").read_text().splitlines()[0])
    assert argv == ["-b", "8", "-e", "8589934592", "-f", "2", "-g", "16", "-n", "3", "-w", "5", "-c", "1",
                    "-d", "float", "-o", "sum"]

    res.stdout.fnmatch_lines([
        "*sendrecv_perf on * exited with status 127 without output clustercheck can read*libnccl.so.2*",
        "*17 wrong elements at size 1048576 B out-of-place (output line 41)*",
        "*all_reduce_perf_mpi: run: exited with status 1 (nccl-tests exits non-zero when a result is wrong*",
        "*busbw 337.4 GB/s misses the limit >= 400 GB/s*",
        "*nvbandwidth: run: line 21: Invalid value when checking the pattern*exited with status 134*",
        "*SKIPPED: broadcast_perf not found on PATH on *",
    ])
    bad = [v for v in by_id["nccl-wrong"]["verdicts"] if not v["passed"]]
    assert {v["metric"] for v in bad} == {"run", "wrong"}
    assert [v["subject"] for v in bad if v["metric"] == "wrong"] == ["1048576 B out-of-place"]

    nvb = by_id["nvb-pass"]
    per_gpu = {v["subject"]: v["measured"] for v in nvb["verdicts"] if v["metric"] == "host_to_device_memcpy_ce"}
    assert len(per_gpu) == 8 and per_gpu["GPU4"] == 26.19 and min(per_gpu.values()) == 25.94
    assert nvb["metrics"]["host_to_device_memcpy_ce_min"]["value"] == 25.94 and nvb["figure"] == "bars"
    crash = by_id["nvb-crash"]
    assert [v["metric"] for v in crash["verdicts"]] == ["run"]  # nothing measured, nothing else judged
    html = (project.path / "out" / "latest" / "report.html").read_text()
    assert html.count("<svg") >= 2 and "nccl-pass" in html and "GPU7" in html


@pytest.mark.parametrize("platform", ["h100-sxm-8x", "h200-sxm-8x"])
def test_the_shipped_suite_has_limits_for_every_check_on_the_8_gpu_profiles(platform: str) -> None:
    from clustercheck.run.judge import check_metrics
    from clustercheck.judging.thresholds import load_profile

    root = Path(__file__).resolve().parent.parent
    suite = load_suite(root / "suites" / "native-tools.yaml")
    profile = load_profile(root / "thresholds" / f"{platform}.yaml")
    assert {c.measure for c in suite.checks} >= {"nccl_tests", "nvbandwidth", "all_reduce"}
    for check in suite.checks:
        check_metrics(check, profile)  # every limit names a metric its kind reports, in a fitting unit
        limits = profile.limits_for(check.id)
        assert limits and all("https://" in limit.source or "allreduce-default" in limit.source or
                              check.measure not in ("nccl_tests", "nvbandwidth") for limit in limits.values())
    assert profile.limits["nvbandwidth-p2p"]["device_to_device_memcpy_read_ce"].value == 335.0


# -- judging edge cases, without a pool -------------------------------------------------------------

def _answers(tmp_path: Path, measure: str, params: str, ran: dict) -> object:
    from clustercheck.kinds.base import Answers

    path = tmp_path / "s.yaml"
    path.write_text(f"checks:\n  - id: x\n    measure: {measure}\n    params: {params}\n")
    check = load_suite(path).checks[0]
    if measure == "nccl_tests" and "stdout" in ran:  # the capture as this node's run (tests/nccl_standin.py)
        ran = {**ran, "stdout": one_node(ran["stdout"])}
        ran.setdefault("argv", asked(ran["stdout"]))
    result = {"host": "node7", "binary": "all_reduce_perf", "argv": [], "outcome": "ran", "returncode": 0,
              "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": "", "stdout_bytes": 0,
              "truncated": False, "stderr_tail": "", **ran}
    return Answers(check, [result, {}], [{"host": "node7"}, {"host": "node7"}], "gloo")


def _judge(answers: object) -> tuple[object, list]:
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Rules

    return KINDS[answers.check.measure].judge(answers, Rules({}))  # type: ignore[attr-defined]


def test_a_run_stopped_by_its_timeout_fails_on_what_it_printed(tmp_path: Path) -> None:
    head = "\n".join(captured(NCCL_PASS).split("\n")[:30])  # the table cut after 8 rows
    _, verdicts = _judge(_answers(tmp_path, "nccl_tests", "{}", {"stdout": head, "timed_out": True,
                                                                  "returncode": -9}))
    run = next(v for v in verdicts if v.metric == "run")
    assert not run.passed and "without its 'Out of bounds values' footer" in run.detail
    assert "stopped after 54 s" in run.detail


def test_validation_asked_for_but_not_done_fails_and_validation_off_does_not(tmp_path: Path) -> None:
    def unchecked(line: str) -> str:  # the #wrong columns of a row (9th and 13th) as `-c 0` prints them
        tokens = line.split()
        return " ".join(tokens[:8] + ["N/A"] + tokens[9:12] + ["N/A"]) if tokens and tokens[0].isdigit() else line

    text = "\n".join(unchecked(line) for line in captured(NCCL_PASS).split("\n"))
    assert text.count("N/A") == 62
    _, asked = _judge(_answers(tmp_path, "nccl_tests", "{check: 1}", {"stdout": text}))
    assert [(v.metric, v.passed) for v in asked if v.metric == "wrong"] == [("wrong", False)]
    with pytest.raises(UserError, match="turns off nccl-tests' data check"):  # refused before it runs
        _answers(tmp_path, "nccl_tests", "{check: 0}", {"stdout": text})


def test_one_result_left_unchecked_in_a_run_that_asked_for_validation_fails(tmp_path: Path) -> None:
    lines = captured(NCCL_PASS).split("\n")
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["8589934592"])
    lines[at] = lines[at][:lines[at].rindex("0")] + "N/A"
    _, verdicts = _judge(_answers(tmp_path, "nccl_tests", "{check: 1}", {"stdout": "\n".join(lines)}))
    bad = [v for v in verdicts if v.metric == "wrong" and not v.passed]
    assert [(v.subject, v.measured) for v in bad] == [("8589934592 B in-place", "N/A")]
    assert "validation was asked for (-c 1)" in (bad[0].detail or "")


def test_out_of_bounds_values_fail_and_cut_output_is_an_error_not_a_verdict(tmp_path: Path) -> None:
    from clustercheck.errors import HarnessError

    text = captured(NCCL_PASS).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    _, verdicts = _judge(_answers(tmp_path, "nccl_tests", "{}", {"stdout": text, "returncode": 1}))
    assert [(v.metric, v.measured) for v in verdicts if not v.passed] == [("out_of_bounds", 4.0), ("run", "failed")]
    with pytest.raises(HarnessError, match="more than clustercheck keeps"):
        _judge(_answers(tmp_path, "nccl_tests", "{}", {"stdout": text, "truncated": True, "stdout_bytes": 9 << 20}))


@pytest.mark.parametrize("edit", ["none", "wrong", "out_of_bounds"])
def test_a_capture_and_a_run_of_the_same_text_give_the_same_data_verdicts(tmp_path: Path, edit: str) -> None:
    """One judge per tool output: `probe nccl-tests --input` and `measure: nccl_tests` read the same text to
    the same correctness verdicts (subject, what, pass, detail), whatever the text says."""
    from clustercheck.probes import nccl_tests as probe
    from clustercheck.toolout import nccl_tests as reader

    text = {"none": captured(NCCL_PASS), "wrong": wrong_capture(),
            "out_of_bounds": captured(NCCL_PASS).replace("# Out of bounds values : 0 OK",
                                                         "# Out of bounds values : 4 FAILED")}[edit]
    offline = probe.judge(reader.parse(text), {})
    _, verdicts = _judge(_answers(tmp_path, "nccl_tests", "{check: 1}", {"stdout": text}))
    ran = {(v.subject, v.metric, v.passed, v.detail) for v in verdicts if v.metric in ("wrong", "out_of_bounds")}
    seen = {(v.subject, v.what, v.passed, v.detail) for v in offline
            if v.what in ("wrong", "out_of_bounds")}
    assert ran == seen and ran, (ran, seen)
    assert any(not p for _, _, p, _ in ran) == (edit != "none")


def test_a_capture_and_a_run_name_nvbandwidth_cells_alike(tmp_path: Path) -> None:
    """One cell name: the probe's verdicts and the run's subjects name a pair `GPU6<-GPU0` alike."""
    from clustercheck.probes import nvbandwidth as probe
    from clustercheck.toolout import nvbandwidth as reader

    text = captured(NVB_P2P)
    offline = probe.judge(reader.parse(text), {"p2p_min": 1000.0})
    m, _ = _judge(_answers(tmp_path, "nvbandwidth", "{testcases: [device_to_device_memcpy_write_ce]}",
                           {"stdout": text, "binary": "nvbandwidth"}))
    subjects = set(m.subjects)  # type: ignore[attr-defined]
    failed = next(v for v in offline if v.what == "p2p_min" and not v.passed)
    named = {s for s in subjects if f"{s} " in failed.detail}
    assert len(named) >= 8, (sorted(subjects)[:4], failed.detail)


# -- small profiles: applicability and the tool before the threshold ------------------------------------

NATIVE_SUITE = Path(__file__).resolve().parent.parent / "suites" / "native-tools.yaml"
ONE_GPU = FIXTURES / "nvbandwidth" / "all-tests-partial-dgx-station-gb300-c2c.txt"  # one GPU's nvbandwidth


def _one_gpu_run(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, bin_dir: Path) -> tuple[int, str, dict]:
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    res = project.runpytest(str(NATIVE_SUITE), "--platform", "h100-sxm-1x", "--ranks", "1", *RUN)
    out = res.stdout.str()
    data = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    return res.ret, out, {r["check"]: r for r in data["results"]}


def test_the_shipped_native_suite_on_one_gpu_skips_what_does_not_apply_before_any_threshold(
        project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """h100-sxm-1x has no threshold for nccl-tests: over one GPU it moves no data, so it is skipped as
    clustercheck's own all_reduce is; a tool that is not installed is skipped, never 'no threshold'."""
    bin_dir = project.path / "bin"
    bin_dir.mkdir()
    code, out, by_id = _one_gpu_run(project, monkeypatch, bin_dir)
    assert code == 5, out  # nothing applied here: nothing judged, not a harness error
    assert "no threshold" not in out and "Traceback" not in out
    assert {k: r["outcome"] for k, r in by_id.items()} == {k: "skipped" for k in by_id}
    reasons = {k: r["message"] for k, r in by_id.items()}
    assert "over a single rank moves no data" in reasons["nccl-tests-allreduce"]
    assert "nvbandwidth not found on PATH" in reasons["nvbandwidth-host"]
    assert "need two GPUs or more; this node has one" in reasons["nvbandwidth-p2p"]


def test_nvbandwidth_on_one_gpu_is_judged_by_the_one_gpu_profile(project: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = project.path / "bin"
    bin_dir.mkdir()
    standin(bin_dir, "nvbandwidth", [("", captured(ONE_GPU), 0)])
    code, out, by_id = _one_gpu_run(project, monkeypatch, bin_dir)
    assert code == 0, out
    host = by_id["nvbandwidth-host"]
    assert host["outcome"] == "passed", out
    judged = {(v["metric"], v["subject"]): v for v in host["verdicts"]}
    h2d = judged[("host_to_device_memcpy_ce", "GPU0")]
    assert h2d["measured"] == 359.05 and h2d["limit"] == 48.0 and "defaults.nvbandwidth" in h2d["origin"]
    assert judged[("device_to_host_memcpy_ce", "GPU0")]["measured"] == 377.15
    assert by_id["nvbandwidth-p2p"]["outcome"] == "skipped" and by_id["nccl-tests-allreduce"]["outcome"] == "skipped"
