"""clustercheck.judging.thresholds: profiles resolved against the spec table, unit conversion, Limit.passes and
Limit.margin, and one-line errors naming file:line:key; every shipped profile loads."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clustercheck.judging import specs
from clustercheck.errors import UserError
from clustercheck.judging.limits import Limit
from clustercheck.judging.thresholds import load_profile
from helpers import all_limits, load_named, profile_names

THRESHOLDS = Path(__file__).resolve().parent.parent / "thresholds"

HEAD = """\
platform: lab
description: test profile
detect:
  gpu_count: 8
  pci_device_ids: [0x2330, 0x2324]
  nvlinks_per_gpu: 18
hardware:
  nvlink: nvlink4
  pcie: pcie5_x16
checks:
"""
# HEAD has 10 lines, so the check id is on line 11, the metric on 12, `limit:` on 13, `unit:` on 14.


def write(tmp_path: Path, text: str, name: str = "lab.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_limit(limit: str, unit: str = "GB/s", extra: str = "") -> str:
    return HEAD + f"  c:\n    busbw:\n      limit: \"{limit}\"\n      unit: {unit}\n" + extra


def limit_of(tmp_path: Path, limit: str, unit: str = "GB/s") -> Limit:
    return load_profile(write(tmp_path, one_limit(limit, unit))).limits["c"]["busbw"]


def error_of(tmp_path: Path, text: str, name: str = "lab.yaml") -> UserError:
    with pytest.raises(UserError) as info:
        load_profile(write(tmp_path, text, name))
    assert "\n" not in str(info.value)
    return info.value


def assert_points_at(exc: UserError, tmp_path: Path, line: int, key: str, name: str = "lab.yaml") -> None:
    assert str(exc).startswith(f"{tmp_path / name}:{line}: {key}: "), str(exc)


def make(op: str, value: float) -> Limit:
    return Limit("c", "busbw", op, value, "GB/s", f"{op} {value}", "", "t.yaml:1")


# -- loading and resolving ------------------------------------------------------------------

def test_profile_header_fields(tmp_path):
    profile = load_profile(write(tmp_path, one_limit(">= 1")))
    assert profile.name == "lab"
    assert profile.description == "test profile"
    assert profile.detect == {"gpu_count": 8, "pci_device_ids": (0x2324, 0x2330), "nvlinks_per_gpu": 18}
    assert profile.hardware == {"nvlink": "nvlink4", "pcie": "pcie5_x16"}


def test_limit_through_hardware_role(tmp_path):
    limit = limit_of(tmp_path, ">= spec.nvlink.unidirectional")
    assert (limit.op, limit.value, limit.unit) == (">=", 450.0, "GB/s")


def test_limit_through_direct_spec_name(tmp_path):
    assert limit_of(tmp_path, ">= spec.nvlink4.unidirectional").value == 450.0
    assert limit_of(tmp_path, ">= spec.nvlink3.unidirectional").value == 300.0


def test_role_follows_the_hardware_mapping(tmp_path):
    text = one_limit(">= 0.5 * spec.nvlink.bidirectional").replace("nvlink: nvlink4", "nvlink: nvlink5")
    assert load_profile(write(tmp_path, text)).limits["c"]["busbw"].value == 900.0


def test_limit_keeps_expression_source_origin_and_spec_source(tmp_path):
    path = write(tmp_path, one_limit(">= 0.8 * spec.nvlink.unidirectional", extra="      source: measured 400\n"))
    limit = load_profile(path).limits["c"]["busbw"]
    assert limit.expression == ">= 0.8 * spec.nvlink.unidirectional"
    assert limit.source == "measured 400"
    assert limit.origin == f"{path}:13 checks.c.busbw"
    assert (limit.file, limit.line, limit.key) == (str(path), 13, "checks.c.busbw")
    assert len(limit.spec_sources) == 1
    assert limit.spec_sources[0].startswith("spec.nvlink.unidirectional = 450 GB/s: ")
    assert specs.SPECS["nvlink4"]["unidirectional"].source in limit.spec_sources[0]


def test_plain_number_limit_is_taken_in_the_threshold_unit(tmp_path):
    limit = limit_of(tmp_path, "<= 50000", "us")
    assert (limit.op, limit.value, limit.unit, limit.spec_sources) == ("<=", 50000.0, "us", ())


def test_gb_per_s_expression_in_gbit_per_s_is_times_eight(tmp_path):
    limit = limit_of(tmp_path, ">= 0.8 * spec.nvlink.unidirectional", "Gb/s")
    assert limit.value == pytest.approx(0.8 * 450 * 8, rel=1e-12)
    assert limit.unit == "Gb/s"


def test_gb_per_s_expression_in_mb_per_s(tmp_path):
    assert limit_of(tmp_path, ">= spec.pcie.unidirectional", "MB/s").value == pytest.approx(
        specs.SPECS["pcie5_x16"]["unidirectional"].value * 1000, rel=1e-12)


def test_expression_unit_must_fit_the_threshold_unit(tmp_path):
    exc = error_of(tmp_path, one_limit(">= spec.nvlink.links"))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert "cannot convert count to GB/s" in str(exc)


def test_a_percentage_of_nothing_is_refused_and_a_share_of_a_spec_or_a_limit_in_percent_is_not(tmp_path):
    exc = error_of(tmp_path, one_limit(">= 5%"))  # 0.05 GB/s before: a floor nothing fails
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert "a percentage of nothing: it reads as 0.05 GB/s" in str(exc)
    assert limit_of(tmp_path, ">= 80% * spec.nvlink.unidirectional", "GB/s").value == pytest.approx(360.0)
    assert limit_of(tmp_path, "<= 5%", "ratio").value == pytest.approx(0.05)
    exc = error_of(tmp_path, one_limit("<= 5%", "'%'"))  # 0.05 %, a 100x slip
    assert "it reads as 0.05 %" in str(exc)


def test_several_checks_and_metrics(tmp_path):
    text = HEAD + ("  a:\n    busbw:\n      limit: '>= 1'\n      unit: GB/s\n"
                   "    time_us:\n      limit: '<= 9'\n      unit: ms\n"
                   "  b:\n    wrong:\n      limit: '== 0'\n      unit: count\n")
    profile = load_profile(write(tmp_path, text))
    assert sorted(profile.limits) == ["a", "b"]
    assert profile.limits_for("a")["time_us"].value == 9.0
    assert profile.limits_for("b")["wrong"].op == "=="
    assert profile.limits_for("absent") is None


def test_minimal_profile_needs_only_platform_and_detect(tmp_path):
    profile = load_profile(write(tmp_path, "platform: lab\ndetect: {gpu_count: 0}\n"))
    assert (profile.detect, profile.hardware, profile.limits) == ({"gpu_count": 0}, {}, {})


# -- Limit.passes and Limit.margin ------------------------------------------------------------

@pytest.mark.parametrize("op, inside, boundary_passes, outside", [
    (">=", 110.0, True, 90.0),
    (">", 110.0, False, 90.0),
    ("<=", 90.0, True, 110.0),
    ("<", 90.0, False, 110.0),
])
def test_passes_for_each_operator(op, inside, boundary_passes, outside):
    limit = make(op, 100.0)
    assert limit.passes(inside)
    assert limit.passes(100.0) is boundary_passes
    assert not limit.passes(outside)


@pytest.mark.parametrize("op", [">=", "<=", ">", "<"])
def test_no_nan_infinity_or_negative_bandwidth_passes_whichever_way_the_limit_points(op):
    from clustercheck.judging.verdicts import of_limit

    limit = make(op, 100.0)  # GB/s
    for bad in (math.nan, math.inf, -math.inf, -5.0):
        assert not limit.passes(bad), bad
        assert of_limit("busbw", bad, limit).detail  # the verdict says why, not just "misses"
    assert of_limit("busbw", 50.0 if op.startswith("<") else 150.0, limit).detail is None
    clock = Limit("chk", "clock_drop", "<=", 0.1, "ratio", "<= 0.1", "test source", "t.yaml:3")
    assert clock.passes(-0.02)  # a ratio may be below 0 (the clock rose)


def test_equality_passes_only_at_the_value():
    limit = make("==", 0.0)
    assert limit.passes(0.0)
    assert not limit.passes(1.0)
    assert not limit.passes(-1.0)


@pytest.mark.parametrize("op", [">=", "<=", ">", "<", "=="])
def test_nan_never_passes(op):
    assert not make(op, 100.0).passes(float("nan"))


@pytest.mark.parametrize("op, measured, margin", [
    (">=", 110.0, 0.10),
    (">=", 90.0, -0.10),
    (">", 125.0, 0.25),
    (">", 50.0, -0.50),
    ("<=", 90.0, 0.10),
    ("<=", 110.0, -0.10),
    ("<", 80.0, 0.20),
    ("<", 130.0, -0.30),
    ("==", 110.0, -0.10),
    ("==", 90.0, -0.10),
])
def test_margin_is_relative_to_the_limit(op, measured, margin):
    assert make(op, 100.0).margin(measured) == pytest.approx(margin, rel=1e-12)


@pytest.mark.parametrize("op", [">=", "<=", ">", "<"])
def test_margin_sign_says_inside_or_outside(op):
    limit = make(op, 100.0)
    for measured in (50.0, 99.0, 101.0, 150.0):
        assert (limit.margin(measured) > 0) == limit.passes(measured)


def test_margin_relative_to_a_negative_limit_uses_its_size():
    assert make(">=", -10.0).margin(-5.0) == pytest.approx(0.5)
    assert make("<=", -10.0).margin(-5.0) == pytest.approx(-0.5)


@pytest.mark.parametrize("op, measured, margin", [
    ("<=", 0.0, 0.0),
    ("<=", 3.0, -3.0),
    (">=", 2.5, 2.5),
    (">=", -1.0, -1.0),
    ("==", 4.0, -4.0),
    ("==", -4.0, -4.0),
])
def test_margin_is_absolute_when_the_limit_is_zero(op, measured, margin):
    assert make(op, 0.0).margin(measured) == margin


@pytest.mark.parametrize("op, value", [(">=", 100.0), (">", 100.0), ("<=", 100.0), ("<", 100.0), ("==", 100.0),
                                       (">=", 0.0), ("<=", 0.0), ("==", 0.0), ("<=", -7.0)])
def test_margin_at_the_boundary_is_positive_zero(op, value):
    margin = make(op, value).margin(value)
    assert margin == 0.0
    assert math.copysign(1.0, margin) == 1.0, "margin must never be -0.0"


def test_margin_for_equality_at_zero_with_negative_zero_measured_is_positive_zero():
    margin = make("==", 0.0).margin(-0.0)
    assert math.copysign(1.0, margin) == 1.0


def test_describe():
    assert make(">=", 328.5).describe() == ">= 328.5 GB/s"
    assert make("<=", 50000.0).describe() == "<= 50000 GB/s"


# -- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("expression", [">= 0.8 spec.nvlink.unidirectional", "0.8 * spec.nvlink.unidirectional",
                                        ">= __import__", ">= (1", ">= 1 / 0"])
def test_bad_expression_names_file_line_and_key(tmp_path, expression):
    exc = error_of(tmp_path, one_limit(expression))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert "bad threshold expression" in str(exc) and expression in str(exc)


def test_expression_given_as_a_number(tmp_path):
    exc = error_of(tmp_path, HEAD + "  c:\n    busbw:\n      limit: 5\n      unit: GB/s\n")
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")


def test_unknown_unit(tmp_path):
    exc = error_of(tmp_path, one_limit(">= 1", "GBps"))
    assert_points_at(exc, tmp_path, 14, "checks.c.busbw.unit")
    assert "GB/s" in str(exc)


def test_missing_unit(tmp_path):
    exc = error_of(tmp_path, HEAD + "  c:\n    busbw:\n      limit: '>= 1'\n")
    assert exc.key == "checks.c.busbw.unit"
    assert exc.line == 13  # a block mapping starts on its first key


def test_unknown_spec_name(tmp_path):
    exc = error_of(tmp_path, one_limit(">= spec.nvlink9.unidirectional"))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert "no spec 'nvlink9'" in str(exc)


def test_unknown_spec_field(tmp_path):
    exc = error_of(tmp_path, one_limit(">= spec.nvlink.sideways"))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert "has no field 'sideways'" in str(exc)


def test_role_missing_from_hardware_is_an_unknown_spec(tmp_path):
    exc = error_of(tmp_path, one_limit(">= spec.infiniband.unidirectional"))
    assert "no spec 'infiniband'" in str(exc)


def test_platform_must_equal_the_file_stem(tmp_path):
    exc = error_of(tmp_path, one_limit(">= 1"), name="other.yaml")
    assert_points_at(exc, tmp_path, 1, "platform", name="other.yaml")
    assert "'other'" in str(exc) and "'lab'" in str(exc)


def test_unknown_key_in_detect(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect:\n  gpu_cnt: 8\n")
    assert_points_at(exc, tmp_path, 3, "detect.gpu_cnt")
    assert "did you mean 'gpu_count'?" in str(exc)


@pytest.mark.parametrize("ids", ["[]", "[0x2330, true]", "['0x2330']"])
def test_bad_pci_device_ids(tmp_path, ids):
    exc = error_of(tmp_path, f"platform: lab\ndetect:\n  pci_device_ids: {ids}\n")
    assert_points_at(exc, tmp_path, 3, "detect.pci_device_ids")


def test_unknown_spec_in_hardware(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {gpu_count: 0}\nhardware:\n  nvlink: nvlink9\n")
    assert_points_at(exc, tmp_path, 4, "hardware.nvlink")
    assert "nvlink4" in str(exc)


def test_hardware_role_must_name_a_spec_as_text(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {gpu_count: 0}\nhardware:\n  nvlink: 4\n")
    assert_points_at(exc, tmp_path, 4, "hardware.nvlink")


def test_unknown_key_in_limit(tmp_path):
    exc = error_of(tmp_path, one_limit(">= 1", extra="      sauce: x\n"))
    assert_points_at(exc, tmp_path, 15, "checks.c.busbw.sauce")
    assert "did you mean 'source'?" in str(exc)


def test_unknown_top_level_key(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {gpu_count: 0}\nthreshold: {}\n")
    assert_points_at(exc, tmp_path, 3, "threshold")


def test_missing_detect(tmp_path):
    exc = error_of(tmp_path, "platform: lab\n")
    assert exc.key == "detect"


def test_metric_not_a_mapping(tmp_path):
    exc = error_of(tmp_path, HEAD + "  c:\n    busbw: '>= 1'\n")
    assert_points_at(exc, tmp_path, 12, "checks.c.busbw")


def test_limit_that_overflows_in_its_unit_is_refused(tmp_path):
    error_of(tmp_path, one_limit(">= 1e305 * spec.nvlink.unidirectional", "MB/s"))


# -- shipped profiles -------------------------------------------------------------------------

SHIPPED = sorted(THRESHOLDS.glob("*.yaml"))


def test_there_are_shipped_profiles():
    assert len(SHIPPED) >= 2
    assert profile_names(THRESHOLDS) == sorted(p.stem for p in SHIPPED)  # by name: gh200 before gh200-144gb


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_profile_loads(path):
    profile = load_profile(path)
    assert profile.name == path.stem
    for metrics in profile.limits.values():
        for limit in metrics.values():
            assert math.isfinite(limit.value)
            assert limit.source, f"{limit.origin}: every shipped limit says where it comes from"


def test_h100_ring_busbw_is_73_percent_of_nvlink4():
    profile = load_named(THRESHOLDS, "h100-sxm-8x")
    limit = profile.limits["allreduce-ring"]["busbw"]
    assert (limit.op, limit.unit) == (">=", "GB/s")
    assert limit.value == pytest.approx(0.73 * 450, rel=1e-12)
    assert limit.value == pytest.approx(328.5, rel=1e-12)


def test_load_named_unknown_platform_lists_the_known_ones():
    with pytest.raises(UserError) as info:
        load_named(THRESHOLDS, "no-such-platform")
    assert "cpu" in str(info.value)


# -- range checks on detect (found by tests/test_fuzz_inputs.py: any integer was accepted) ---------

@pytest.mark.parametrize("key, value", [("gpu_count", -1), ("gpu_count", 1025), ("nvlinks_per_gpu", -2),
                                        ("nvlinks_per_gpu", 65), ("gpu_count", "9" * 1444)])
def test_detect_counts_are_range_checked(tmp_path, key, value):
    exc = error_of(tmp_path, f"platform: lab\ndetect:\n  {key}: {value}\n")
    assert_points_at(exc, tmp_path, 3, f"detect.{key}")
    assert "must be between" in str(exc) and len(str(exc)) < 300


@pytest.mark.parametrize("ids", ["[-1]", "[0x10000]", "[0x2330, 0x" + "f" * 1200 + "]"])
def test_pci_device_ids_are_16_bits(tmp_path, ids):
    exc = error_of(tmp_path, f"platform: lab\ndetect:\n  pci_device_ids: {ids}\n")
    assert_points_at(exc, tmp_path, 3, "detect.pci_device_ids")


def test_a_pci_device_id_listed_twice_is_refused(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect:\n  gpu_count: 0\n  pci_device_ids: [0x2330, 0x2324, 0x2330]\n")
    assert_points_at(exc, tmp_path, 4, "detect.pci_device_ids")
    assert str(exc).endswith("lists the device id 0x2330 twice")


@pytest.mark.parametrize("limit, unit, words", [
    (">= -0.05", "GB/s", "a bandwidth cannot be negative (-0.05 GB/s)"),   # passed any bandwidth
    ("<= -1", "us", "a time cannot be negative (-1 us)"),
    (">= -1", "count", "a count cannot be negative"),
    (">= -0.1 * spec.nvlink.unidirectional", "GB/s", "a bandwidth cannot be negative (-45 GB/s)"),
    (">= -1", "TFLOP/s", "a flops cannot be negative"),
    # a limit at 0 that judges nothing: '>= 0' passed a broken link's 0 GB/s (and '>= 1e-400' underflows to it)
    (">= 0", "GB/s", "a bandwidth is never negative, so '>= 0' passes every measurement; write a floor above 0"),
    (">= 1e-400", "GB/s", "'>= 0' passes every measurement"),
    (">= 0 * spec.nvlink.unidirectional", "GB/s", "'>= 0' passes every measurement"),
    ("< 0", "count", "a count is never negative, so '< 0' fails every measurement; write '<= 0' or '== 0'"),
])
def test_a_limit_no_measurement_of_its_quantity_can_fail_or_pass_is_refused(tmp_path, limit, unit, words):
    exc = error_of(tmp_path, one_limit(limit, unit))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert words in str(exc), str(exc)


@pytest.mark.parametrize("limit, unit", [("<= 0", "count"), ("== 0", "count"), ("> 0", "GB/s"), (">= 0.0001", "GB/s")])
def test_a_limit_at_0_that_judges_is_kept(tmp_path, limit, unit):
    assert limit_of(tmp_path, limit, unit).value in (0, 0.0001)


@pytest.mark.parametrize("text, line, key", [
    (HEAD + "  c:\n    busbw: {limit: '>= 1', unit: GB/s, source: }\n", 12, "checks.c.busbw.source"),
    ("platform: lab\ndetect:\n  gpu_count:\n", 3, "detect.gpu_count"),
    ("platform: lab\ndetect: {gpu_count: 0}\nexpect:\n", 3, "expect"),          # no expectations at all
    ("platform: lab\ndetect: {gpu_count: 0}\nexpect: {acs_redirect: ~}\n", 3, "expect.acs_redirect"),
    ("platform: lab\ndetect: {gpu_count: 0}\ndefaults:\n  all_reduce:\n    when: {min_size: }\n"
     "    busbw: {limit: '>= 1', unit: GB/s}\n", 5, "defaults.all_reduce.when.min_size"),
    ("platform: lab\ndetect: {gpu_count: 0}\nfabric: {fraction: 0.9, min_size: , source: s}\n", 3, "fabric.min_size"),
])
def test_a_profile_key_without_a_value_is_refused_not_read_as_its_default(tmp_path, text, line, key):
    exc = error_of(tmp_path, text)
    assert_points_at(exc, tmp_path, line, key)
    assert str(exc).endswith("no value (null); give one, or leave the key out for its default")


@pytest.mark.parametrize("expect", ['{gpu_model: ""}', "{driver_min: ''}", "{net: ' '}"])
def test_a_profile_expectation_of_empty_text_is_refused_not_read_as_no_check(tmp_path, expect):
    exc = error_of(tmp_path, f"platform: lab\ndetect: {{gpu_count: 0}}\nexpect: {expect}\n")
    assert_points_at(exc, tmp_path, 3, f"expect.{expect.strip('{}').split(':')[0]}")
    assert str(exc).endswith("no value (empty text); give one, or leave the key out for its default")


@pytest.mark.parametrize("text, line, key", [
    ("platform: lab\ndetect: {gpu_count: 0}\nexpect: {gpu_count: 010}\n", 3, "expect.gpu_count"),
    ("platform: lab\ndetect: {gpu_count: 0}\nexpect: {nvlinks_per_gpu: 1_8}\n", 3, "expect.nvlinks_per_gpu"),
    ("platform: lab\ndetect:\n  gpu_count: 0x8\n", 3, "detect.gpu_count"),
])
def test_a_profile_number_in_a_yaml_1_1_form_is_refused(tmp_path, text, line, key):
    exc = error_of(tmp_path, text)
    assert_points_at(exc, tmp_path, line, key)
    assert "to YAML (" in str(exc) and "write the number in plain decimal" in str(exc)


def test_an_expect_argument_in_a_yaml_1_1_number_form_is_refused(capsys):
    from clustercheck.cli import main

    smi = Path(__file__).parent / "fixtures" / "tool-outputs" / "nvidia-smi-q" / \
        "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"
    assert main(["probe", "versions", "--input", str(smi), "--expect", "gpu_count=010"]) == 4
    assert capsys.readouterr().err.strip().endswith("--expect: gpu_count: '010' is 8 to YAML (octal): write the number "
                                                    "in plain decimal, without a leading zero, ':' or '_'")


def test_an_empty_expect_argument_is_refused_exit_4(capsys):
    from clustercheck.cli import main

    smi = Path(__file__).parent / "fixtures" / "tool-outputs" / "nvidia-smi-q" / \
        "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"
    code = main(["probe", "versions", "--input", str(smi), "--expect", "gpu_model=", "--expect", "driver_min="])
    out = capsys.readouterr()
    assert code == 4 and "passed" not in out.out  # "versions: passed", exit 0, before
    assert out.err.strip().endswith("--expect: gpu_model: no value (empty text); give one, or leave the key out for "
                                    "its default")


def test_a_fabric_min_size_no_check_can_reach_is_refused(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {gpu_count: 0}\nfabric:\n  min_size: 1TiB\n  source: s\n")
    assert_points_at(exc, tmp_path, 4, "fabric.min_size")
    assert "above the 256GiB limit" in str(exc)


@pytest.mark.parametrize("limit, unit", [(">= -5", "C"), (">= -0.5", "ratio")])
def test_a_negative_limit_where_the_quantity_can_be_negative_is_kept(tmp_path, limit, unit):
    assert limit_of(tmp_path, limit, unit).value < 0


def test_detect_at_the_range_ends_is_fine(tmp_path):
    profile = load_profile(write(tmp_path, "platform: lab\ndetect:\n  gpu_count: 0\n  nvlinks_per_gpu: 64\n"
                                           "  pci_device_ids: [0, 0xffff]\n"))
    assert profile.detect == {"gpu_count": 0, "pci_device_ids": (0, 0xFFFF), "nvlinks_per_gpu": 64}


def test_a_long_bad_expression_is_quoted_briefly(tmp_path):
    exc = error_of(tmp_path, one_limit(">= " + "1" * 3000 + " +"))
    assert_points_at(exc, tmp_path, 13, "checks.c.busbw.limit")
    assert len(str(exc)) < 700 and "expression ends early" in str(exc)


def test_a_per_collective_floor_naming_no_collective_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("platform: p\ndetect: {gpu_count: 8}\nexpect:\n  busbw_min: {allreduce: 400}\n")
    with pytest.raises(UserError) as info:
        load_profile(path, "p.yaml")
    assert str(info.value).startswith("p.yaml:4: expect.busbw_min: 'allreduce' is not a collective (one of all_reduce,")


@pytest.mark.parametrize("value, message", [
    ("{gpu_temp_max_c: .inf}", "4: expect.gpu_temp_max_c: expected a finite number, got inf"),
    ("{busbw_min: {all_reduce: -.inf}}", "4: expect.busbw_min: all_reduce: expected a finite number, got -inf"),
    ("{p2p_uniformity: .nan}", "4: expect.p2p_uniformity: expected a finite number, got nan"),
    ("{nodes: 1" + "0" * 400 + "}", "4: expect.nodes: expected a number of sensible size, got <a number of about"),
    ("{gpu_count: 1" + "0" * 400 + "}", "4: expect.gpu_count: expected a number of sensible size"),
])
def test_an_expectation_that_is_no_finite_number_is_refused_at_load(tmp_path: Path, value: str, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"platform: p\ndetect: {{gpu_count: 8}}\nexpect:\n  {value[1:-1]}\n")
    with pytest.raises(UserError) as info:
        load_profile(path, "p.yaml")
    assert str(info.value).startswith("p.yaml:" + message), str(info.value)


# -- defaults: per measure kind, overridden by check id; named limits; provenance -------------------

from clustercheck.judging import derive  # noqa: E402
from clustercheck.errors import NoThreshold  # noqa: E402
from clustercheck.run.judge import applicable_limits, check_metrics, rules_for  # noqa: E402
from clustercheck.suite.load import load_suite  # noqa: E402
from clustercheck.judging.verdicts import of_limit, provenance  # noqa: E402
from test_sources import problems  # noqa: E402

DEFAULTS = HEAD + """\
  allreduce-default:
    busbw: {limit: ">= 430", unit: GB/s, source: "own floor"}
defaults:
  all_reduce:
    when: {min_size: 1GiB}
    busbw:
      limit: ">= 0.6 * spec.nvlink.unidirectional"
      unit: GB/s
      source: "kind floor"
  gemm:
    when: {dtype: [auto, bf16, float16]}
    tflops: {limit: ">= 500", unit: TFLOP/s, source: "gemm floor"}
"""
# DEFAULTS: all_reduce on line 14, its `limit:` on 17; gemm on 20, its tflops on 22.


def suite_of(tmp_path: Path, body: str) -> list:
    path = tmp_path / "s.yaml"
    path.write_text("checks:\n" + body, encoding="utf-8")
    return list(load_suite(path, "s.yaml").checks)


def allreduce(check_id: str, judge_at: str = "1GiB", extra: str = "") -> str:
    return (f"  - id: {check_id}\n    measure: all_reduce\n"
            f"    params: {{sizes: [16MiB, 1GiB], judge_at: {judge_at}}}\n" + extra)


def test_defaults_are_read_per_kind_with_their_conditions(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    ar, gemm = profile.defaults["all_reduce"], profile.defaults["gemm"]
    assert (ar.kind, ar.min_size, ar.dtypes, ar.line) == ("all_reduce", 1 << 30, (), 14)
    assert gemm.dtypes == ("auto", "bfloat16", "float16")  # bf16 spelled the canonical way
    busbw = ar.limits["busbw"]
    assert (busbw.value, busbw.check, busbw.key) == (270.0, "", "defaults.all_reduce.busbw")
    assert busbw.origin == f"{tmp_path / 'lab.yaml'}:17 defaults.all_reduce.busbw"
    assert [lim.key for lim in all_limits(profile)] == [
        "checks.allreduce-default.busbw", "defaults.all_reduce.busbw", "defaults.gemm.tflops"]


def test_a_users_own_check_is_judged_by_its_kinds_default_and_says_so(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (mine,) = suite_of(tmp_path, allreduce("my-allreduce"))
    check_metrics(mine, profile)
    rules = rules_for(mine, profile)
    busbw = rules.limits["busbw"]
    assert (busbw.check, busbw.value, busbw.source) == ("my-allreduce", 270.0, "kind floor")
    verdict = of_limit("busbw", 250.0, busbw).as_dict()
    assert not verdict["passed"] and verdict["origin"].endswith(".yaml:17 defaults.all_reduce.busbw")
    assert provenance(verdict).startswith("'>= 0.6 * spec.nvlink.unidirectional' (")
    assert "defaults.all_reduce.busbw" in provenance(verdict) and "kind floor" in provenance(verdict)


def test_a_check_id_the_profile_names_overrides_the_default(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (own,) = suite_of(tmp_path, allreduce("allreduce-default"))
    busbw = rules_for(own, profile).limits["busbw"]
    assert (busbw.value, busbw.key) == (430.0, "checks.allreduce-default.busbw")
    assert busbw.origin.endswith(".yaml:12 checks.allreduce-default.busbw")


def test_a_default_that_does_not_fit_the_check_is_no_threshold_with_the_reason(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    small, fp32 = suite_of(tmp_path, allreduce("small", "16MiB") +
                           "  - id: fp32-gemm\n    measure: gemm\n    params: {dtype: fp32}\n")
    assert applicable_limits(small, profile)[0] == {}
    with pytest.raises(NoThreshold) as info:
        rules_for(small, profile)
    assert "'small' on platform 'lab'" in str(info.value)
    assert "defaults.all_reduce (" in str(info.value) and ":14) applies to checks judged at 1GiB or more, not 16MiB" \
        in str(info.value)
    assert str(info.value).endswith("add one under checks.small or defaults.all_reduce")
    with pytest.raises(NoThreshold, match="applies to dtype auto, bfloat16, float16, not float32"):
        rules_for(fp32, profile)
    (auto,) = suite_of(tmp_path, "  - id: g\n    measure: gemm\n")
    assert rules_for(auto, profile).limits["tflops"].value == 500.0


def test_a_kind_without_a_default_is_still_no_threshold(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (copy,) = suite_of(tmp_path, "  - id: hd\n    measure: host_device\n")
    with pytest.raises(NoThreshold, match="no threshold for check 'hd' on platform 'lab'"):
        rules_for(copy, profile)


def test_a_suite_check_may_borrow_another_check_ids_limits(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (borrower,) = suite_of(tmp_path, allreduce("nvls-16m", "16MiB", "    limits: allreduce-default\n"))
    assert (borrower.limits, borrower.limits_line) == ("allreduce-default", 5)
    check_metrics(borrower, profile)
    busbw = rules_for(borrower, profile).limits["busbw"]
    assert (busbw.check, busbw.value) == ("nvls-16m", 430.0)
    assert busbw.origin.endswith(".yaml:12 checks.allreduce-default.busbw, named by s.yaml:5 limits")


def test_the_check_ids_own_entry_wins_over_the_one_it_names(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (check,) = suite_of(tmp_path, allreduce("allreduce-default", extra="    limits: nothing-here\n"))
    assert rules_for(check, profile).limits["busbw"].key == "checks.allreduce-default.busbw"


def test_a_named_limit_the_profile_lacks_is_refused_naming_suite_line_and_key(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (check,) = suite_of(tmp_path, allreduce("mine", extra="    limits: allreduce-ring\n"))
    with pytest.raises(UserError) as info:
        check_metrics(check, profile)
    assert str(info.value).startswith("s.yaml:5: limits: check 'mine' names limits 'allreduce-ring', which platform "
                                      "'lab' ")
    assert str(info.value).endswith("(it has: allreduce-default)")


def test_a_borrowed_limit_must_fit_the_borrowers_kind(tmp_path):
    profile = load_profile(write(tmp_path, DEFAULTS))
    (check,) = suite_of(tmp_path, "  - id: hd\n    measure: host_device\n    limits: allreduce-default\n")
    with pytest.raises(UserError) as info:
        check_metrics(check, profile)
    assert str(info.value).startswith(f"{tmp_path / 'lab.yaml'}:12: checks.allreduce-default.busbw: host_device "
                                      "reports no metric 'busbw'")
    assert "check 'hd' of s.yaml:2 names it in limits:" in str(info.value)


@pytest.mark.parametrize("body, error", [
    ("    limits: 'no such id!'\n", "s.yaml:4: checks[0].limits: 'no such id!' is not a check id"),
    ("    limits: [a]\n", "s.yaml:4: checks[0].limits: expected text"),
])
def test_the_named_limit_key_is_checked_in_the_suite(tmp_path, body, error):
    with pytest.raises(UserError) as info:
        suite_of(tmp_path, "  - id: a\n    measure: all_reduce\n" + body)
    assert str(info.value).startswith(error), str(info.value)


def test_a_probe_cannot_name_limits(tmp_path):
    with pytest.raises(UserError, match="checks.0..limits: probe is judged against the profile's expect: block"):
        suite_of(tmp_path, "  - id: v\n    measure: probe\n    params: {probe: versions}\n    limits: x\n")


@pytest.mark.parametrize("body, line, key, message", [
    ("  all_reduce: {}\n", 11, "defaults.all_reduce", "names no metric"),
    ("  all_reduce:\n    when: {dtype: [int8]}\n    busbw: {limit: '>= 1', unit: GB/s}\n", 12,
     "defaults.all_reduce.when.dtype", "expected a list of dtypes from auto, bfloat16, float16, float32"),
    ("  all_reduce:\n    when: {min_size: lots}\n    busbw: {limit: '>= 1', unit: GB/s}\n", 12,
     "defaults.all_reduce.when.min_size", "expected a size such as 16MiB"),
    ("  all_reduce:\n    when: {size: 1GiB}\n    busbw: {limit: '>= 1', unit: GB/s}\n", 12,
     "defaults.all_reduce.when.size", "unknown key"),
    ("  all_reduce:\n    when: {min_size: 99999999999999999999999GiB}\n    busbw: {limit: '>= 1', unit: GB/s}\n", 12,
     "defaults.all_reduce.when.min_size", "is above the 256GiB limit"),  # could never apply: judged nothing
    ("  all_reduce:\n    busbw: {limit: '>= spec.nvlink.nope', unit: GB/s}\n", 12,
     "defaults.all_reduce.busbw.limit", "bad threshold expression"),
])
def test_bad_defaults_name_file_line_and_key(tmp_path, body, line, key, message):
    exc = error_of(tmp_path, HEAD.replace("checks:\n", "defaults:\n") + body)
    assert_points_at(exc, tmp_path, line, key)
    assert message in str(exc), str(exc)


@pytest.mark.parametrize("body, key, message", [
    ("  allreduce:\n    busbw: {limit: '>= 1', unit: GB/s}\n", "defaults.allreduce", "no measure kind 'allreduce'"),
    ("  all_reduce:\n    bandwidth: {limit: '>= 1', unit: GB/s}\n", "defaults.all_reduce.bandwidth",
     "all_reduce reports no metric 'bandwidth'"),
    ("  gemm:\n    tflops: {limit: '>= 1', unit: GB/s}\n", "defaults.gemm.tflops.unit", "unit GB/s does not fit tflops"),
])
def test_defaults_for_an_unknown_kind_or_metric_are_refused_before_any_check_runs(tmp_path, body, key, message):
    profile = load_profile(write(tmp_path, HEAD.replace("checks:\n", "defaults:\n") + body))
    (check,) = suite_of(tmp_path, "  - id: v\n    measure: probe\n    params: {probe: versions}\n")
    with pytest.raises(UserError) as info:
        check_metrics(check, profile)  # even a check that uses no default: the profile is wrong
    assert f": {key}: {message}" in str(info.value) and str(info.value).startswith(str(tmp_path / "lab.yaml"))


SHIPPED_AND_DERIVED = SHIPPED + [derive.derived_name(m, n) for m in derive.MODELS for n in (1, 2, 8)
                                 if n <= m.max_gpus]


@pytest.mark.parametrize("where", SHIPPED_AND_DERIVED, ids=str)
def test_every_limit_and_default_cites_a_public_source(where):
    profile = load_profile(where) if isinstance(where, Path) else derive.derived_by_name(where)
    assert profile is not None
    bad = [(lim.key, what) for lim in all_limits(profile)
           for what in problems(lim.source) + [w for s in lim.spec_sources for w in problems(s)]]
    assert not bad


@pytest.mark.parametrize("name, kinds", [
    ("h100-sxm-8x", {"all_reduce", "host_device", "device_memory", "gemm", "burn"}),
    ("h200-sxm-8x", {"all_reduce", "host_device", "device_memory", "gemm", "burn"}),
    ("a100-sxm-8x", {"all_reduce", "host_device", "device_memory", "gemm"}),
    ("a100-sxm-80gb-8x", {"all_reduce", "host_device", "device_memory", "gemm"}),
    ("b200-8x", {"all_reduce", "host_device", "device_memory", "gemm"}),
    ("gh200", {"host_device", "device_memory", "gemm", "nvbandwidth"}),
    ("gh200-144gb", {"host_device", "device_memory", "gemm", "nvbandwidth"}),
    ("h100-sxm-1x", {"host_device", "device_memory", "gemm", "burn", "nvbandwidth"}),
    ("h200-sxm-1x", {"host_device", "device_memory", "gemm", "burn", "nvbandwidth"}),
])
def test_shipped_profiles_judge_a_users_new_checks_of_these_kinds(name, kinds):
    profile = load_named(THRESHOLDS, name)
    assert set(profile.defaults) == kinds
    if "all_reduce" in kinds:
        assert profile.defaults["all_reduce"].limits["busbw"].value == pytest.approx(
            0.6 * specs.lookup(profile.hardware["nvlink"], "unidirectional").value)
    gemm = profile.defaults["gemm"].limits["tflops"]
    assert gemm.unit == "TFLOP/s" and gemm.spec_sources[0].startswith("spec.tensor.bf16_dense = ")
    # host_device and device_memory are the checks' own limits (one YAML anchor), under their default key
    if "host-device" in profile.limits:
        assert profile.defaults["host_device"].limits["h2d"].value == profile.limits["host-device"]["h2d"].value
        assert profile.defaults["host_device"].limits["h2d"].key == "defaults.host_device.h2d"


def test_single_gpu_profiles_have_no_peers():
    for name, hbm in (("h100-sxm-1x", 3350), ("h200-sxm-1x", 4800)):
        profile = load_named(THRESHOLDS, name)
        assert profile.detect["gpu_count"] == profile.expect["gpu_count"] == 1
        assert "nvlink" not in profile.hardware and profile.detect["nvlinks_per_gpu"] == 0  # an HGX GPU has 18
        assert not {"allreduce-default", "p2p-matrix"} & set(profile.limits)
        assert profile.limits["device-memory"]["bandwidth"].spec_sources[0].startswith(
            f"spec.hbm.bandwidth = {hbm} GB/s")


def test_b200_and_gh200_memory_floors_follow_dcgm():
    b200 = load_named(THRESHOLDS, "b200-8x").limits["device-memory"]["bandwidth"]
    gh200 = load_named(THRESHOLDS, "gh200").limits["device-memory"]["bandwidth"]
    gh200_144 = load_named(THRESHOLDS, "gh200-144gb").limits["device-memory"]["bandwidth"]
    assert b200.value == pytest.approx(4072.0) and b200.value <= 4072.5  # DCGM 2901: 4072500 MB/s
    assert gh200.value == pytest.approx(2120.0) and gh200.value <= 2130.0  # DCGM 2342
    assert gh200_144.value == pytest.approx(0.477 * 4900) and 2330.0 <= gh200_144.value <= 2340.0  # DCGM 2348
    assert all("NVIDIA/DCGM" in f.source for f in (b200, gh200, gh200_144))


def test_gpu_smoke_has_a_limit_for_every_check_on_single_gpu_profiles():
    suite = load_suite(THRESHOLDS.parent / "suites" / "gpu-smoke.yaml")
    assert [c.measure for c in suite.checks] == ["probe", "host_device", "device_memory", "gemm", "all_reduce"]
    for name in ("h100-sxm-1x", "h200-sxm-1x", "h100-sxm-8x", "gh200", "gh200-144gb"):
        profile = load_named(THRESHOLDS, name)
        for check in suite.checks:
            check_metrics(check, profile)
            if check.measure not in ("probe", "all_reduce"):  # all_reduce over one GPU is skipped, not judged
                assert rules_for(check, profile).limits, (name, check.id)


def test_end_to_end_a_users_own_check_is_judged_by_the_profiles_default(project: pytest.Pytester) -> None:
    """Real gloo ranks: a check id the profile never names is judged by defaults.all_reduce, the record and
    the terminal say which rule applied, and a check that borrows limits says where it borrowed them."""
    import json

    from helpers import CPU_THRESHOLDS, small_check, write_suite

    (project.path / "thresholds" / "cpu.yaml").write_text(CPU_THRESHOLDS + (
        "defaults:\n  all_reduce:\n    busbw: {limit: \">= 0.000001\", unit: GB/s, source: \"clustercheck's test floor\"}\n"))
    write_suite(project, "checks:\n" + small_check("users-own") + small_check("borrower", limits="too-fast"))
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out",
                                       "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1, failed=1)
    data = json.loads((project.path / "out" / "latest" / "results.json").read_text())
    by_id = {r["check"]: r for r in data["results"]}
    own = next(v for v in by_id["users-own"]["verdicts"] if v["metric"] == "busbw")
    assert own["passed"] and own["origin"] == "thresholds/cpu.yaml:12 defaults.all_reduce.busbw"
    borrowed = next(v for v in by_id["borrower"]["verdicts"] if v["metric"] == "busbw")
    assert not borrowed["passed"] and borrowed["limit"] == 1000000
    assert borrowed["origin"] == "thresholds/cpu.yaml:9 checks.too-fast.busbw, named by suites/s.yaml:8 limits"
    res.stdout.fnmatch_lines(["*limit from '>= 1000000' (thresholds/cpu.yaml:9 checks.too-fast.busbw, named by "
                              "suites/s.yaml:8 limits)*"])


def test_docs_profiles_quotes_the_origins_it_shows():
    doc = (THRESHOLDS.parent / "docs" / "profiles.md").read_text()
    h100 = load_named(THRESHOLDS, "h100-sxm-8x")
    derived = derive.derived_by_name("h100-sxm-4x")
    assert derived is not None
    for limit in (h100.defaults["all_reduce"].limits["busbw"], h100.limits["allreduce-default"]["busbw"],
                  derived.defaults["all_reduce"].limits["busbw"]):
        assert limit.origin in doc, limit.origin
    assert "(thresholds/h100-sxm-8x.yaml:87 defaults.all_reduce.busbw); Ring all_reduce on 8xH100/H200" in doc
    assert h100.defaults["all_reduce"].limits["busbw"].source.startswith("Ring all_reduce on 8xH100/H200")
    for model in derive.MODELS:
        assert f"| {model.slug} | " in doc and f"{model.memory.fraction:g} x " in doc
