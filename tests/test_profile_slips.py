"""A profile's slips that would judge nothing while reading as judged: a ceiling on a time at or above the
check's own timeout (refused at load, one line, exit 4), and a misspelt check id under checks: whose check is
then judged by the looser defaults.<kind> (said as a warning in the run's summary: a profile shared by suites
names checks of other suites, so it is never refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.exitcodes import Exit
from clustercheck.judging.thresholds import load_profile
from clustercheck.suite.load import load_suite
from helpers import small_check, write_suite

RUN = ("--thresholds", "thresholds", "--cc-out", "out")


def _profile(tmp_path: Path, body: str):
    path = tmp_path / "cpu.yaml"
    path.write_text(f"platform: cpu\ndetect:\n  gpu_count: 0\n{body}")
    return load_profile(path)


def _check(tmp_path: Path, timeout: float = 60):
    path = tmp_path / "s.yaml"
    path.write_text(f"checks:\n  - id: x\n    measure: all_reduce\n    params: {{sizes: [1MiB]}}\n"
                    f"    timeout: {timeout}\n")
    return load_suite(path).checks[0]


# -- a ceiling on a time the timeout makes unfailable ------------------------------------------------------

@pytest.mark.parametrize(("limit", "unit"), [("<= 1e300", "us"), ("<= 60", "s"), ("< 61", "s"), ("<= 60000", "ms")])
def test_a_time_ceiling_at_or_above_the_timeout_is_refused_naming_file_line_and_key(
        tmp_path: Path, limit: str, unit: str) -> None:
    from clustercheck.run.judge import check_metrics

    profile = _profile(tmp_path, f"checks:\n  x:\n    time_us:\n      limit: \"{limit}\"\n      unit: {unit}\n")
    with pytest.raises(UserError) as exc:
        check_metrics(_check(tmp_path, timeout=60), profile)
    message = str(exc.value)
    assert message.startswith(f"{profile.file}:7: checks.x.time_us.limit: time_us (us): ")
    assert "timeout of check 'x' (60 s" in message and "judges nothing" in message and "\n" not in message


def test_a_defaults_time_ceiling_is_refused_for_the_check_it_judges(tmp_path: Path) -> None:
    from clustercheck.run.judge import check_metrics

    profile = _profile(tmp_path, "defaults:\n  all_reduce:\n    busbw: {limit: \">= 1\", unit: GB/s}\n"
                                 "    time_us: {limit: \"<= 1e300\", unit: us}\n")
    with pytest.raises(UserError) as exc:
        check_metrics(_check(tmp_path), profile)
    assert str(exc.value).startswith(f"{profile.file}:7: defaults.all_reduce.time_us.limit: ")


@pytest.mark.parametrize(("limit", "unit"), [("<= 500", "us"), ("< 59", "s"), (">= 1e300", "us")])
def test_a_time_limit_within_the_timeout_still_loads(tmp_path: Path, limit: str, unit: str) -> None:
    from clustercheck.run.judge import check_metrics

    profile = _profile(tmp_path, f"checks:\n  x:\n    time_us:\n      limit: \"{limit}\"\n      unit: {unit}\n")
    check_metrics(_check(tmp_path, timeout=60), profile)


def test_a_run_with_an_unfailable_time_ceiling_exits_4_in_one_line(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(
        "platform: cpu\ndetect:\n  gpu_count: 0\nchecks:\n  ok:\n"
        "    time_us: {limit: \"<= 1e300\", unit: us, source: slip}\n")
    write_suite(project, "checks:\n" + small_check("ok"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == Exit.BAD_INPUT
    res.stderr.fnmatch_lines(["*cpu.yaml:6: checks.ok.time_us.limit: time_us (us): '<= 1e300' (us) is at or above "
                              "the timeout of check 'ok'*"])


# -- a misspelt check id under checks: whose check the looser default judges ------------------------------

def _typo_profile(extra: str) -> str:
    """defaults.all_reduce passes any loopback; checks: holds `extra` (lines of ids with an impossible floor)."""
    return ("platform: cpu\ndetect:\n  gpu_count: 0\ndefaults:\n  all_reduce:\n"
            "    busbw: {limit: \">= 0.000001\", unit: GB/s, source: loose}\nchecks:\n" + extra)


def _strict(check_id: str) -> str:
    return f"  {check_id}:\n    busbw: {{limit: \">= 1000000\", unit: GB/s, source: strict}}\n"


def _checks(tmp_path: Path, *ids: str):
    path = tmp_path / "s.yaml"
    path.write_text("checks:\n" + "".join(small_check(i) for i in ids))
    return load_suite(path).checks


def test_a_misspelt_check_id_judged_by_the_default_is_said_once_naming_both_ids_file_and_line(tmp_path: Path) -> None:
    from clustercheck.run.judge import check_run

    path = tmp_path / "cpu.yaml"
    path.write_text(_typo_profile(_strict("allreduce-swep")))
    profile = load_profile(path)
    (said,) = check_run(_checks(tmp_path, "allreduce-sweep"), profile)
    assert said.startswith("warning: check 'allreduce-sweep' (") and f"defaults.all_reduce ({path}:5)" in said
    assert f"{path}:8 checks: names 'allreduce-swep', which no check of this run has" in said


@pytest.mark.parametrize("extra", [
    _strict("p2p-pairs") + _strict("gemm-bf16"),  # far from every check of the run
    _strict("allreduce-sweep-2n"),  # another suite's variant of the check
    _strict("allreduce-sweep2"),  # ... differing in digits alone
])
def test_a_profile_whose_other_ids_are_variants_or_far_says_nothing(tmp_path: Path, extra: str) -> None:
    from clustercheck.run.judge import check_run

    path = tmp_path / "cpu.yaml"
    path.write_text(_typo_profile(extra))
    assert check_run(_checks(tmp_path, "allreduce-sweep"), load_profile(path)) == []


def test_a_near_id_that_a_check_of_the_run_has_is_no_misspelling(tmp_path: Path) -> None:
    from clustercheck.run.judge import check_run

    path = tmp_path / "cpu.yaml"
    path.write_text(_typo_profile(_strict("allreduce-swep")))
    assert check_run(_checks(tmp_path, "allreduce-sweep", "allreduce-swep"), load_profile(path)) == []


def test_a_run_judged_by_the_default_under_a_misspelt_id_says_so_in_its_summary(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text(_typo_profile(_strict("allreduce-swep")))
    write_suite(project, "checks:\n" + small_check("allreduce-sweep"))
    res = project.runpytest("suites/s.yaml", *RUN)
    assert res.ret == Exit.PASSED  # the loose default judged it: no refusal, a warning
    res.stdout.fnmatch_lines(["warning: check 'allreduce-sweep' (*s.yaml:2) is judged by defaults.all_reduce "
                              "(thresholds/cpu.yaml:5), and thresholds/cpu.yaml:8 checks: names 'allreduce-swep'*"])
    assert sum("warning: check" in line for line in res.outlines) == 1


def test_shipped_suites_and_profiles_say_no_misspelling() -> None:
    """`allreduce-burn` (burn-in suites) beside the GPU profiles' `allreduce-ring` (quick-gate's) scored 0.857
    over the whole ids and warned on every burn-in of five shipped profiles: another word is another check."""
    from clustercheck.run.judge import near_misses

    repo = Path(__file__).resolve().parent.parent
    said = [line for suite in sorted((repo / "suites").glob("*.yaml"))
            for profile in sorted((repo / "thresholds").glob("*.yaml"))
            for line in near_misses(load_suite(suite).checks, load_profile(profile))]
    assert said == []
