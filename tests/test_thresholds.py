"""clustercheck.thresholds: profiles resolved against the spec table, unit conversion, Limit.passes and
Limit.margin, and one-line errors naming file:line:key; every shipped profile loads."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clustercheck import specs
from clustercheck.errors import UserError
from clustercheck.thresholds import Limit, load_named, load_profile, profile_names

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
    profile = load_profile(write(tmp_path, "platform: lab\ndetect: {}\n"))
    assert (profile.detect, profile.hardware, profile.limits) == ({}, {}, {})


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
    exc = error_of(tmp_path, "platform: lab\ndetect: {}\nhardware:\n  nvlink: nvlink9\n")
    assert_points_at(exc, tmp_path, 4, "hardware.nvlink")
    assert "nvlink4" in str(exc)


def test_hardware_role_must_name_a_spec_as_text(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {}\nhardware:\n  nvlink: 4\n")
    assert_points_at(exc, tmp_path, 4, "hardware.nvlink")


def test_unknown_key_in_limit(tmp_path):
    exc = error_of(tmp_path, one_limit(">= 1", extra="      sauce: x\n"))
    assert_points_at(exc, tmp_path, 15, "checks.c.busbw.sauce")
    assert "did you mean 'source'?" in str(exc)


def test_unknown_top_level_key(tmp_path):
    exc = error_of(tmp_path, "platform: lab\ndetect: {}\nthreshold: {}\n")
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
    assert profile_names(THRESHOLDS) == [p.stem for p in SHIPPED]


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
                                        ("nvlinks_per_gpu", 65), ("gpu_count", "0x" + "f" * 1200)])
def test_detect_counts_are_range_checked(tmp_path, key, value):
    exc = error_of(tmp_path, f"platform: lab\ndetect:\n  {key}: {value}\n")
    assert_points_at(exc, tmp_path, 3, f"detect.{key}")
    assert "must be between" in str(exc) and len(str(exc)) < 300


@pytest.mark.parametrize("ids", ["[-1]", "[0x10000]", "[0x2330, 0x" + "f" * 1200 + "]"])
def test_pci_device_ids_are_16_bits(tmp_path, ids):
    exc = error_of(tmp_path, f"platform: lab\ndetect:\n  pci_device_ids: {ids}\n")
    assert_points_at(exc, tmp_path, 3, "detect.pci_device_ids")


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
