"""Captures from the H100 lent to clustercheck's GPU validation (tests/fixtures/gpu-validation, driver
580.159.04, docs/validation/2026-11-25-h100-sxm.md) read by the probes that read them live there: the R580
`nvidia-smi -q` layout (split SRAM ECC keys, SRAM error sources), a one-GPU `topo -m`, the bus-id query."""

from __future__ import annotations

from clustercheck.probes import ecc, nvsmi, pcie_link, throttle, topo, versions
from clustercheck.probes.nvsmi import parse_bus_ids
from evidence import LENT

Q = (LENT / "h100-sxm-vm-580-nvidia-smi-q.txt").read_text()


def test_the_r580_query_names_one_clean_h100_with_its_versions() -> None:
    report = nvsmi.parse(Q)
    assert len(report.gpus) == 1
    inv = versions.parse(Q)
    assert (inv.driver, inv.cuda, inv.gpu_count) == ("580.159.04", "13.0", 1)
    (verdict,) = ecc.judge(ecc.parse(Q), {})
    assert verdict.passed, verdict


def test_an_sram_error_in_the_r580_layout_fails_ecc() -> None:
    broken = Q.replace("SRAM Uncorrectable SEC-DED                 : 0", "SRAM Uncorrectable SEC-DED                 : 2", 1)
    assert broken != Q
    (verdict,) = ecc.judge(ecc.parse(broken), {})
    assert not verdict.passed and "SEC-DED" in verdict.detail, verdict


def test_the_r580_query_gives_a_gen5_x16_link_and_an_idle_unthrottled_gpu() -> None:
    (link,) = pcie_link.judge(pcie_link.parse(Q), {})
    assert link.passed and "Gen5 x16" in link.detail, link
    verdicts = throttle.judge(throttle.parse(Q), {})
    assert verdicts and all(v.passed for v in verdicts), verdicts


def test_a_one_gpu_matrix_has_no_pair_and_no_nic() -> None:
    m = topo.parse((LENT / "h100-sxm-vm-580-topo-m.txt").read_text())
    assert (len(m.gpus), len(m.nics)) == (1, 0)
    assert [n for _, n in m.numa] == ["0"]


def test_the_bus_id_query_maps_index_0_to_the_vm_slot() -> None:
    lines = (LENT / "h100-sxm-vm-580-query-bus-id.txt").read_text().splitlines()
    assert parse_bus_ids("\n".join(lines[2:])) == {0: "0000:00:06.0"}
