"""Fail closed: a check that judged nothing, a limit that can never fail and a number out of its domain never
read as a pass (a limit of that sort is refused at load in one line; a check of that sort is not judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.errors import HarnessError, NoThreshold, Skip, UserError
from clustercheck.suite.load import load_suite

FIXTURES = Path(__file__).parent / "fixtures" / "tool-outputs"


def captured(path: Path) -> str:
    lines = path.read_text().split("\n")
    assert lines[0].startswith("# source:") and not lines[1].strip()
    return "\n".join(lines[2:])


def _check(tmp_path: Path, measure: str, params: str, name: str = "x"):
    path = tmp_path / "s.yaml"
    path.write_text(f"checks:\n  - id: {name}\n    measure: {measure}\n    params: {params}\n")
    return load_suite(path).checks[0]


def _ran(check, stdout: str, binary: str = "nvbandwidth"):
    from clustercheck.kinds.base import Answers

    result = {"host": "node7", "binary": binary, "argv": [], "outcome": "ran", "returncode": 0,
              "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout, "stdout_bytes": len(stdout),
              "truncated": False, "stderr_tail": ""}
    return Answers(check, [result, {}], [{"host": "node7"}, {"host": "node7"}], "gloo")


# -- 1. nvbandwidth defaults for other testcases only -------------------------------------------------------

def test_nvbandwidth_defaults_that_all_miss_the_testcase_leave_the_check_not_judged(tmp_path: Path) -> None:
    from clustercheck.judging.derive import derived_by_name
    from clustercheck.run.judge import judge, rules_for

    profile = derived_by_name("h100-sxm-4x")
    assert profile is not None and "nvbandwidth" in profile.defaults
    check = _check(tmp_path, "nvbandwidth", "{testcases: [device_to_device_bidirectional_memcpy_write_ce]}")
    rules = rules_for(check, profile)
    assert rules.limits  # the defaults apply to the kind, before the testcases are known
    text = captured(FIXTURES / "nvbandwidth" / "d2d-bidirectional-write-ce-total-8xh100-p5.txt")
    with pytest.raises(NoThreshold) as exc:
        judge(_ran(check, text), rules, {})
    message = str(exc.value)
    line = profile.defaults["nvbandwidth"].line
    assert "not judged" in message and f"{profile.file}:{line}" in message
    assert "host_to_device_memcpy_ce" in message and "device_to_device_memcpy_read_ce" in message
    assert "this check runs device_to_device_bidirectional_memcpy_write_ce" in message


def test_nvbandwidth_defaults_that_cover_the_testcase_still_judge_it(tmp_path: Path) -> None:
    from clustercheck.judging.derive import derived_by_name
    from clustercheck.run.judge import judge, rules_for

    profile = derived_by_name("h100-sxm-4x")
    check = _check(tmp_path, "nvbandwidth", "{testcases: [device_to_device_memcpy_write_ce]}")
    text = captured(FIXTURES / "nvbandwidth" / "d2d-memcpy-write-ce-8gpu-readme.txt")
    outcome = judge(_ran(check, text), rules_for(check, profile), {})
    assert any(v.metric == "device_to_device_memcpy_write_ce" and "defaults.nvbandwidth" in v.rule.origin
               for v in outcome.verdicts)


# -- 2. a limit that passes every value of its metric ------------------------------------------------------

def _profile(tmp_path: Path, checks: str):
    from clustercheck.judging.thresholds import load_profile

    path = tmp_path / "cpu.yaml"
    path.write_text(f"platform: cpu\ndetect:\n  gpu_count: 0\nchecks:\n{checks}")
    return load_profile(path)


@pytest.mark.parametrize(("measure", "params", "metric", "limit", "unit"), [
    ("p2p", "{}", "p2p_min_ratio", ">= 0", "ratio"),
    ("p2p", "{}", "p2p_min_ratio", ">= -1", "ratio"),
    ("p2p", "{}", "asymmetry_max", "<= 1", "ratio"),
    ("p2p", "{}", "p2p_min_ratio", ">= 0", "%"),
    ("all_reduce", "{sizes: [1MiB]}", "iter_cv", "<= 1e300", "ratio"),
    ("all_reduce", "{sizes: [1MiB]}", "iter_cv", ">= -0.5", "ratio"),
    ("burn", "{duration: 1}", "relative", ">= 0", "ratio"),
    ("burn", "{duration: 1}", "clock_drop", "<= 1", "ratio"),
    ("burn", "{duration: 1}", "relative", ">= 1.5", "ratio"),  # can never pass: 90 meant as 90%?
    ("nvbandwidth", "{}", "host_to_device_memcpy_ce_min_ratio", ">= 0", "ratio"),
    ("nvbandwidth", "{}", "host_to_device_memcpy_ce_min_ratio", "<= 1", "ratio"),
])
def test_a_ratio_limit_that_judges_nothing_is_refused_naming_file_line_and_key(
        tmp_path: Path, measure: str, params: str, metric: str, limit: str, unit: str) -> None:
    from clustercheck.run.judge import check_metrics

    profile = _profile(tmp_path, f"  x:\n    {metric}:\n      limit: \"{limit}\"\n      unit: \"{unit}\"\n")
    check = _check(tmp_path, measure, params)
    with pytest.raises(UserError) as exc:
        check_metrics(check, profile)
    assert str(exc.value).startswith(f"{profile.file}:7: checks.x.{metric}.limit: ")
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(("measure", "params", "metric", "limit"), [
    ("p2p", "{}", "p2p_min_ratio", ">= 0.9"),
    ("p2p", "{}", "p2p_min_ratio", "> 0"),
    ("p2p", "{}", "asymmetry_max", "< 1"),
    ("p2p", "{}", "ratio_to_median", "<= 1.5"),
    ("all_reduce", "{sizes: [1MiB]}", "iter_cv", "<= 0.2"),
    ("burn", "{duration: 1}", "relative", ">= 1"),
    ("ib_write_bw", "{}", "line_fraction", ">= 1.05"),  # a share of a spec may exceed 1
])
def test_a_ratio_limit_that_can_fail_still_loads(tmp_path: Path, measure: str, params: str, metric: str,
                                                  limit: str) -> None:
    from clustercheck.run.judge import check_metrics

    profile = _profile(tmp_path, f"  x:\n    {metric}:\n      limit: \"{limit}\"\n      unit: ratio\n")
    check_metrics(_check(tmp_path, measure, params), profile)


def test_every_ratio_metric_of_the_built_in_kinds_has_a_domain() -> None:
    from clustercheck.kinds import KINDS

    for kind in KINDS.values():
        for metric, unit in kind.metrics.items():
            if unit == "ratio":
                assert metric in kind.domains, f"{kind.name}.{metric}"
                assert kind.domain(metric)[0] == 0.0


# -- 3. a zero floor in expect ---------------------------------------------------------------------------

FLOORS = ["h2d_min", "d2h_min", "p2p_min", "busbw_min", "busbw_min_multinode"]


@pytest.mark.parametrize("key", FLOORS)
def test_a_zero_floor_in_expect_is_refused_on_the_command_line(key: str) -> None:
    from clustercheck.judging.expect import parse_expect_args

    with pytest.raises(UserError, match=f"^--expect: {key}: expected a floor in GB/s above 0, got 0$"):
        parse_expect_args([f"{key}=0"])
    assert parse_expect_args([f"{key}=0.5"]) == {key: 0.5}


@pytest.mark.parametrize("key", FLOORS)
def test_a_zero_floor_in_a_profile_or_a_suites_probe_expect_is_refused_with_its_line(key: str) -> None:
    from clustercheck.judging.expect import check_expect
    from clustercheck import yamlfile

    doc = yamlfile.loads(f"gpu_count: 8\n{key}: 0\n", "p.yaml")
    with pytest.raises(UserError, match=f"^p.yaml:2: expect.{key}: expected a floor in GB/s above 0, got 0$"):
        check_expect(doc, "p.yaml", "expect", 1)


def test_a_zero_floor_per_collective_is_refused() -> None:
    from clustercheck.judging.expect import parse_expect_args

    with pytest.raises(UserError, match="all_gather: expected a floor in GB/s above 0, got 0"):
        parse_expect_args(["busbw_min={all_reduce: 430, all_gather: 0}"])


def test_probe_nvbandwidth_with_a_zero_h2d_floor_is_bad_input_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    text = captured(FIXTURES / "nvbandwidth" / "h2d-memcpy-ce-8gpu-readme.txt")
    cells = text.split("\n")
    row = next(i for i, line in enumerate(cells) if line.startswith("0 "))
    cells[row] = cells[row].replace("26.03", " 0.01", 1)  # one near-dead GPU
    assert " 0.01 " in cells[row]
    capture = tmp_path / "h2d.txt"
    capture.write_text("\n".join(cells))
    proc = subprocess.run([sys.executable, "-m", "clustercheck", "probe", "nvbandwidth", "--input", str(capture),
                           "--expect", "h2d_min=0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(said) == 1 and "h2d_min" in said[0] and "above 0" in said[0], said


# -- 4. a suite as it is written: a BOM, flow style, an upper-case extension --------------------------------

SUITE = "checks:\n  - id: a\n    measure: all_reduce\n    params: {sizes: [1KiB]}\n"
FLOW = "{checks: [{id: a, measure: all_reduce, params: {sizes: [1KiB]}}]}\n"


def _collect(tmp_path: Path, name: str, data: bytes):
    import subprocess
    import sys

    (tmp_path / name).write_bytes(data)
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", name, "--co", "-p", "no:cacheprovider"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("name", "data"), [
    ("bom.yaml", b"\xef\xbb\xbf" + SUITE.encode()),
    ("flow.yaml", FLOW.encode()),
    ("upper.YAML", SUITE.encode()),
    ("upper.YML", b"\xef\xbb\xbf" + FLOW.encode()),
])
def test_a_valid_suite_named_on_the_command_line_is_collected(tmp_path: Path, name: str, data: bytes) -> None:
    proc = _collect(tmp_path, name, data)
    assert proc.returncode == 0 and "not found" not in proc.stdout, proc.stdout + proc.stderr
    assert "a" in proc.stdout and "1 " in proc.stdout


def test_a_yaml_file_named_on_the_command_line_that_is_no_suite_is_judged_by_the_loader(tmp_path: Path) -> None:
    proc = _collect(tmp_path, "other.yaml", b"suites: []\n")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "other.yaml:1" in proc.stdout + proc.stderr and "not found" not in proc.stdout


@pytest.mark.parametrize("data", [b"\xef\xbb\xbf" + SUITE.encode(), FLOW.encode(), b"checks : []\n"])
def test_is_suite_file_reads_a_bom_and_flow_style(tmp_path: Path, data: bytes) -> None:
    from clustercheck.suite.load import is_suite_file

    (tmp_path / "s.yaml").write_bytes(data)
    assert is_suite_file(tmp_path / "s.yaml")
    (tmp_path / "p.yaml").write_text("platform: cpu\ndetect: {gpu_count: 0}\n")
    assert not is_suite_file(tmp_path / "p.yaml")


def test_a_profile_with_an_upper_case_extension_is_found_and_one_name_twice_is_refused(tmp_path: Path) -> None:
    from clustercheck.judging.profiles import SearchPath

    (tmp_path / "mine.YAML").write_text("platform: mine\ndetect:\n  gpu_count: 3\n")
    path = SearchPath((tmp_path,), tmp_path)
    assert path.files() == {"mine": tmp_path / "mine.YAML"}
    assert path.load("mine").detect == {"gpu_count": 3}
    (tmp_path / "mine.yml").write_text("platform: mine\ndetect:\n  gpu_count: 3\n")
    with pytest.raises(UserError, match="a second threshold profile 'mine'"):
        path.files()


# -- 5. check_iters: 0 ------------------------------------------------------------------------------------

def _collective_answers(check):
    from clustercheck.kinds.base import Answers

    def rank(wrong: int) -> dict:
        return {"dtype": "float32", "rows": [{"size": 1 << 20, "count": 1 << 18, "bytes": 1 << 20, "placement": "in",
                                             "seconds": 1e-3, "wrong": wrong, "iter_seconds": [1e-3, 1e-3]}]}
    return Answers(check, [rank(0), rank(0)], [{"host": "node1"}, {"host": "node2"}], "gloo")


@pytest.mark.parametrize(("check_iters", "wrong"), [(0, False), (1, True)])
def test_a_collective_that_checked_no_element_has_no_wrong_verdict_and_says_so(
        tmp_path: Path, check_iters: int, wrong: bool) -> None:
    from clustercheck.judging.limits import Limit
    from clustercheck.kinds.base import Rules
    from clustercheck.run.judge import judge

    check = _check(tmp_path, "all_reduce", f"{{sizes: [1MiB], check_iters: {check_iters}}}")
    floor = Limit(check.id, "busbw", ">=", 0.1, "GB/s", ">= 0.1", "test", "test")
    outcome = judge(_collective_answers(check), Rules({"busbw": floor}), {})
    assert [v.metric for v in outcome.verdicts] == ["busbw", "wrong"][:1 + wrong]
    said = [n for n in outcome.notes if "correctness not checked" in n]
    assert said == ([] if wrong else ["node[1-2]: correctness not checked (check_iters: 0)"])
    assert ("wrong" in outcome.measurement.metrics) == wrong


# -- 6. a profile entry that names nothing ----------------------------------------------------------------

@pytest.mark.parametrize(("body", "where"), [
    ("checks:\n  a: {}\n", "p.yaml:5: checks.a: names no metric"),
    ("defaults:\n  gemm:\n    when: {dtype: []}\n    tflops: {limit: '>= 1', unit: TFLOP/s}\n",
     "p.yaml:6: defaults.gemm.when.dtype: an empty list names no dtype"),
])
def test_a_profile_entry_that_names_nothing_is_refused_at_load(tmp_path: Path, body: str, where: str) -> None:
    from clustercheck.judging.thresholds import parse_profile
    from clustercheck import yamlfile

    doc = yamlfile.loads(f"platform: p\ndetect:\n  gpu_count: 0\n{body}", "p.yaml")
    with pytest.raises(UserError) as exc:
        parse_profile(doc, "p.yaml", "p")
    assert str(exc.value).startswith(where) and "\n" not in str(exc.value)


# -- 7. a probe that judged nothing ----------------------------------------------------------------------

def _probe_answers(tmp_path: Path, sent: dict):
    from clustercheck.kinds.base import Answers

    check = _check(tmp_path, "probe", "{probe: ib-write-bw}")
    return Answers(check, [{"host": "node7", "reason": "", **sent}], [{"host": "node7"}], "gloo")


def test_a_probe_that_judged_nothing_is_not_judged_an_error_not_a_skip(tmp_path: Path) -> None:
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Rules

    verdict = {"subject": "mlx5_0", "what": "bandwidth", "passed": False, "judged": False, "measured": None,
               "expected": None, "detail": "not judged: no floor given (--expect ib_write_bw_min=N Gb/s per NIC)"}
    sent = {"outcome": "not judged", "verdicts": [verdict]}
    with pytest.raises(HarnessError) as exc:
        KINDS["probe"].judge(_probe_answers(tmp_path, sent), Rules({}))
    assert not isinstance(exc.value, Skip)
    assert str(exc.value).startswith("not judged: probe ib-write-bw on node7 judged nothing: mlx5_0: bandwidth: ")


def test_a_probe_whose_tool_is_absent_stays_a_skip_with_its_reason(tmp_path: Path) -> None:
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Rules

    sent = {"outcome": "skipped", "reason": "ib_write_bw not found on PATH", "verdicts": []}
    with pytest.raises(Skip, match="^ib_write_bw not found on PATH$"):
        KINDS["probe"].judge(_probe_answers(tmp_path, sent), Rules({}))


# -- a measured number outside its metric's domain ---------------------------------------------------------

@pytest.mark.parametrize(("measured", "passed"), [(1.5, False), (-0.1, False), (0.95, True)])
def test_a_measured_ratio_outside_its_domain_fails_whatever_its_limit_says(measured: float, passed: bool) -> None:
    from clustercheck.judging.limits import Limit
    from clustercheck.judging.verdicts import of_limit
    from clustercheck.run.judge import _in_domain

    floor = Limit("p2p", "p2p_min_ratio", ">=", 0.8, "ratio", ">= 0.8", "test", "test")  # 1.5 passes it
    verdict = _in_domain("p2p", of_limit("p2p_min_ratio", measured, floor))
    assert verdict.passed is passed
    if not passed:
        assert verdict.detail and "out of the domain of p2p_min_ratio (0 to 1)" in verdict.detail
