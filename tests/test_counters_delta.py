"""delta() over NVML snapshots (the real pynvml over the stand-in library answering from the real 8 x H100
capture, tests/nvml_capture.py) where GPUs are lost and NVML renumbers the rest: a fault on an index is
named by a bus id only when that bus id gives no counters after the window."""

from __future__ import annotations

import pytest

from clustercheck.counters import delta, judge
from nvml_capture import failing, h100_node, without
from test_counters_nvml import GPU_IS_LOST, counted, snap


def gpu_name(node: dict, i: int) -> str:
    return f"GPU{i} ({node['gpus'][i]['bus_id'][4:].lower()})"


def test_a_gpu_lost_at_an_index_renumbering_moved_a_live_gpu_to_is_not_named_by_that_gpus_bus_id(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU3 no longer enumerated and GPU5 (index 4 after NVML renumbers) lost before NVML gave its PCI
    info, `GPU4` alone: the snapshot before read GPU4 as the GPU whose bus id is now GPU3's, alive, and the
    fault used to be named by it, failing a healthy GPU."""
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    after = snap(monkeypatch, failing(without(node, node["gpus"][3]["bus_id"]), 4, "*", GPU_IS_LOST), 60.0)
    j = judge(delta(before, after))
    devices = [e.device for e in j.vanished]
    assert gpu_name(node, 4) not in devices, devices  # alive after the window, as GPU3
    assert sorted(devices) == [gpu_name(node, 3), gpu_name(node, 5)]  # two lost, each named once
    assert not j.harness_errors and not j.failed


def test_two_gpus_lost_in_one_window_are_each_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPUs lost in one window used to fail three or more times: the GPU NVML still lists, renumbered,
    as `GPU<i>` (lost before it gave its PCI info) was named by that index beside its own bus id, which no
    GPU answered for after the window. Each lost GPU is named once, by bus id, the lost ones tied to their
    index by the order NVML lists the GPUs in."""
    node = counted(h100_node())
    bus = [g["bus_id"] for g in node["gpus"]]
    before = snap(monkeypatch, node, 0.0)
    # GPU1 not enumerated; GPU3 and GPU6 lost at indices 2 and 5 after renumbering: three lost, three named
    after = failing(failing(without(node, bus[1]), 2, "*", GPU_IS_LOST), 5, "*", GPU_IS_LOST)
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert sorted(e.device for e in j.vanished) == [gpu_name(node, 1), gpu_name(node, 3), gpu_name(node, 6)]
    # tied by the order NVML lists them in: each lost one says the index NVML lists it at now
    said = {e.device: e.error for e in j.vanished}
    assert "NVML lists it as GPU2 after the window" in said[gpu_name(node, 3)], said
    assert "NVML lists it as GPU5 after the window" in said[gpu_name(node, 6)], said
    assert "fell off the bus" in said[gpu_name(node, 1)], said
    # GPU0 not enumerated and GPU2 lost at index 1 (GPU1's index before the window): two lost, two named
    after = failing(without(node, bus[0]), 1, "*", GPU_IS_LOST)
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert sorted(e.device for e in j.vanished) == [gpu_name(node, 0), gpu_name(node, 2)]
    said = {e.device: (e.what, e.error) for e in j.vanished}
    assert said[gpu_name(node, 2)][0] == "nvmlDeviceGetHandleByIndex", said
    assert "NVML_ERROR_GPU_IS_LOST" in said[gpu_name(node, 2)][1] and "as GPU1 after" in said[gpu_name(node, 2)][1]
    assert not j.harness_errors and not j.failed


def test_a_single_gpu_lost_at_its_own_index_is_still_named_by_its_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    j = judge(delta(before, snap(monkeypatch, failing(node, 2, "*", GPU_IS_LOST), 30.0)))
    assert [e.device for e in j.vanished] == [gpu_name(node, 2)]


def test_nvml_that_cannot_start_after_the_window_is_not_judged_never_every_gpu_vanished(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nvmlInit failing after the window (NVML_ERROR_UNKNOWN: the harness could not ask) made each of the 8
    GPUs and their links "vanished", failed hardware, where nothing was known of them."""
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    j = judge(delta(before, snap(monkeypatch, {**node, "init_error": 999}, 30.0)))
    assert not j.vanished and not j.failed, j.vanished[:3]
    assert [(e.reader, e.what) for e in j.harness_errors] == [("nvml", "nvmlInit")]


def test_an_infiniband_device_unreadable_after_the_window_accounts_for_its_ports() -> None:
    from clustercheck.counters.facts import ReadError

    err = ReadError("ib", "mlx5_1", "/sys/class/infiniband/mlx5_1/ports", "Permission denied")
    assert err.explains("ib.port_rcv_errors", "mlx5_1/1") and not err.explains("ib.port_rcv_errors", "mlx5_10/1")
