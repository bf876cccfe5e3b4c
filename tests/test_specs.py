"""The spec table: every value has a unit and a source; duplex is twice unidirectional; PCIe arithmetic."""

from __future__ import annotations

import pytest

from helpers import pcie_unidirectional
from clustercheck.judging import specs
from clustercheck import units


@pytest.mark.parametrize("name", sorted(specs.SPECS))
def test_every_value_has_a_known_unit_and_a_source(name):
    for field, value in specs.SPECS[name].items():
        assert value.unit in units.UNITS, (name, field)
        assert len(value.source) > 10, (name, field)
        assert value.value > 0


@pytest.mark.parametrize("name", sorted(specs.SPECS))
def test_direction_is_explicit_and_duplex_is_twice_unidirectional(name):
    entry = specs.SPECS[name]
    assert not any(f in ("bandwidth_total", "speed", "rate") for f in entry)
    for field in entry:
        if field.endswith("bidirectional"):
            uni = field[: -len("bidirectional")] + "unidirectional"
            assert entry[field].value == pytest.approx(2 * entry[uni].value, rel=1e-3), (name, field)


@pytest.mark.parametrize("gen, uni_x16", [(3, 15.75), (4, 31.51), (5, 63.02), (6, 121.0), (7, 242.0)])
def test_pcie_x16_rates_match_measurement_md_and_ml_engineering(gen, uni_x16):
    assert specs.SPECS[f"pcie{gen}_x16"]["unidirectional"].value == pytest.approx(uni_x16, abs=0.01)
    assert pcie_unidirectional(gen, 16) == pytest.approx(uni_x16, abs=0.01)


def test_pcie_gen4_x8_equals_gen3_x16():
    assert pcie_unidirectional(4, 8) == pytest.approx(pcie_unidirectional(3, 16))


@pytest.mark.parametrize("name, uni", [("nvlink3", 300), ("nvlink4", 450), ("nvlink5", 900), ("nvlink3_bridge", 56.25)])
def test_nvlink_unidirectional(name, uni):
    entry = specs.SPECS[name]
    assert entry["unidirectional"].value == uni == entry["links"].value * entry["per_link_unidirectional"].value


def test_xgmi_peer_vs_all_to_all():
    mi300x = specs.SPECS["xgmi_mi300x"]
    assert (mi300x["peer_unidirectional"].value, mi300x["all_to_all_unidirectional"].value) == (64, 448)
    assert specs.SPECS["xgmi_mi250x"]["all_to_all_unidirectional"].value == 350


@pytest.mark.parametrize("name, port", [("ib_edr", 100), ("ib_hdr", 200), ("ib_ndr", 400), ("ib_xdr", 800)])
def test_infiniband_port_rates_in_gbit(name, port):
    value = specs.SPECS[name]["port_unidirectional"]
    assert (value.value, value.unit) == (port, "Gb/s")


def test_existing_keys_kept_for_profiles():
    for name in ("nvlink3", "nvlink4", "nvlink5", "pcie3_x16", "pcie4_x16", "pcie5_x16"):
        assert {"unidirectional", "bidirectional"} <= set(specs.SPECS[name])
    assert specs.lookup("nvlink4", "links").value == 18
    with pytest.raises(KeyError, match="known"):
        specs.lookup("nvlink9", "unidirectional")


TENSOR = sorted(n for n in specs.SPECS if n.startswith("tensor_"))


@pytest.mark.parametrize("name, bf16", [("tensor_a100", 312), ("tensor_h100_sxm", 989), ("tensor_h200", 989),
                                        ("tensor_gh200", 989), ("tensor_b200", 2250), ("tensor_l40s", 362.05),
                                        ("tensor_a40", 149.7), ("tensor_mi300x", 1307.4), ("tensor_mi325x", 1307.4)])
def test_tensor_core_throughput_is_dense(name, bf16):
    """Dense figures: half of what datasheets print 'with sparsity'; FP8 twice BF16 where the part has it."""
    entry = specs.SPECS[name]
    assert entry["bf16_dense"].value == entry["fp16_dense"].value == bf16
    assert entry["tf32_dense"].value == pytest.approx(bf16 / 2, rel=0.02)  # L40S: 183 vs 362.05 / 2
    if "fp8_dense" in entry:
        assert entry["fp8_dense"].value == pytest.approx(2 * bf16, rel=0.02)  # L40S: 733 vs 2 x 362.05
    assert all(v.unit == "TFLOP/s" and "dense" in v.source and "https://" in v.source for v in entry.values())
    assert "sparsity" in entry["bf16_dense"].source


def test_parts_without_fp8_have_no_fp8_figure():
    assert [n for n in TENSOR if "fp8_dense" not in specs.SPECS[n]] == ["tensor_a100", "tensor_a40"]
