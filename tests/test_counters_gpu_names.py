"""Which GPU a window names when two GPU faults meet in it (the real pynvml over the stand-in library
answering from the real 8 x H100 capture, tests/nvml_capture.py): a fault NVML gives by index alone
(`GPU2`, before it gave the PCI info) is tied to a bus id only by the order NVML lists the GPUs in, never
by the index the GPU had before the window (NVML renumbers the GPUs after one that is gone). The GPUs
said vanished are the ones gone, never a live one; what cannot be told is named as such; the window fails."""

from __future__ import annotations

import pytest

from clustercheck.counters import delta, judge
from clustercheck.judging.windows import item_verdicts
from nvml_capture import failing, h100_node, without
from test_counters_nvml import GPU_IS_LOST, counted, snap

UNKNOWN = 999  # NVML_ERROR_UNKNOWN: nvmlDeviceGetPciInfo answering it leaves the GPU `GPU<i>` alone


def buses(node: dict) -> list[str]:
    return [g["bus_id"][4:].lower() for g in node["gpus"]]


def named(devices: list[str]) -> set[str]:
    """The bus ids the vanished errors name."""
    return {b for d in devices for b in buses(counted(h100_node())) if b in d}


def fails_the_node(j) -> None:  # type: ignore[no-untyped-def]
    out = item_verdicts("c", {"gpu-node": j}, ["gpu-node"])
    assert out and not all(v.passed for v in out) and any(v.measured == "gone" for v in out), out


def test_a_gpu_gone_and_the_next_one_unreadable_at_its_index_name_neither_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(a) 0000:3a (index 2) gone, and the GPU NVML lists at index 2 after the window (0000:5d, index 3
    before) unreadable: `GPU2` "explained" 0000:3a, so 0000:5d, alive, was said vanished and 0000:3a never
    named. Which of the two is gone cannot be told from an index: both are named, together, as one loss."""
    node = counted(h100_node())
    bus = buses(node)
    before = snap(monkeypatch, node, 0.0)
    after = failing(without(node, node["gpus"][2]["bus_id"]), 2, "nvmlDeviceGetPciInfo_v3", UNKNOWN)
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert [e.device for e in j.vanished] == [f"GPU2 ({bus[2]}) or GPU3 ({bus[3]})"], j.vanished
    assert "1 of these 2 GPUs was enumerated by NVML before the window and not after it" in j.vanished[0].error
    assert [e.device for e in j.harness_errors] == ["GPU2"]  # the unreadable one: not judged
    fails_the_node(j)


def test_a_gpu_gone_below_an_unreadable_index_is_the_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """(b) 0000:2a (index 1) gone, index 2 unreadable: 0000:2a and 0000:5d (alive) were both said vanished.
    NVML lists 0000:3a as GPU1 and 0000:9a as GPU3, so GPU2 is 0000:5d: 0000:2a alone is gone."""
    node = counted(h100_node())
    bus = buses(node)
    before = snap(monkeypatch, node, 0.0)
    after = failing(without(node, node["gpus"][1]["bus_id"]), 2, "nvmlDeviceGetPciInfo_v3", UNKNOWN)
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert [e.device for e in j.vanished] == [f"GPU1 ({bus[1]})"], j.vanished
    assert bus[3] not in named([e.device for e in j.vanished])
    assert [e.device for e in j.harness_errors] == ["GPU2"]
    fails_the_node(j)


def test_a_gpu_lost_in_an_earlier_window_is_not_the_one_gone_in_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """(c) GPU2 lost in window 1 and still lost; 0000:ab (GPU5) not enumerated in window 2: window 2
    showed GPU2's error text under GPU5's name (the carried error relabelled). Each is said as it is."""
    node = counted(h100_node())
    bus = buses(node)
    lost = failing(node, 2, "*", GPU_IS_LOST)
    first = snap(monkeypatch, lost, 60.0)
    j = judge(delta(first, snap(monkeypatch, without(lost, node["gpus"][5]["bus_id"]), 120.0)))
    said = {e.device: (e.what, e.error) for e in j.vanished}
    assert set(said) == {"GPU2", f"GPU5 ({bus[5]})"}, said
    assert said["GPU2"][0] == "nvmlDeviceGetHandleByIndex"
    assert said[f"GPU5 ({bus[5]})"] == ("gpu.present", "enumerated by NVML before the window and not after it: "
                                        "the GPU fell off the bus or was detached")
    fails_the_node(j)


@pytest.mark.parametrize("gone, index", [(1, 1), (1, 3), (4, 2), (0, 6)])
def test_a_gpu_gone_and_another_lost_at_an_index_name_exactly_the_two(
        monkeypatch: pytest.MonkeyPatch, gone: int, index: int) -> None:
    """One GPU not enumerated, another lost at `index` after NVML renumbered: the two gone, by bus id, and
    no live one."""
    node = counted(h100_node())
    bus = buses(node)
    before = snap(monkeypatch, node, 0.0)
    after = failing(without(node, node["gpus"][gone]["bus_id"]), index, "*", GPU_IS_LOST)
    lost = index + (index >= gone)  # its index before the window
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert sorted(e.device for e in j.vanished) == sorted([f"GPU{gone} ({bus[gone]})", f"GPU{lost} ({bus[lost]})"])
    assert not j.harness_errors
    fails_the_node(j)


def test_a_gpu_lost_after_it_gave_its_pci_info_under_a_new_index_is_one_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """0000:18 gone; 0000:5d, GPU2 after the window (GPU3 before), lost on its first counter call: its
    error names it `GPU2 (0000:5d:00.0)`, which accounts for the counters read as `GPU3 (0000:5d:00.0)`."""
    node = counted(h100_node())
    bus = buses(node)
    before = snap(monkeypatch, node, 0.0)
    after = failing(without(node, node["gpus"][0]["bus_id"]), 2, "nvmlDeviceGetTotalEccErrors", GPU_IS_LOST)
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert sorted(e.device for e in j.vanished) == [f"GPU0 ({bus[0]})", f"GPU2 ({bus[3]})"], j.vanished
    fails_the_node(j)


def test_a_gpu_that_appears_during_the_window_is_one_failed_verdict_measured_appeared(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """0000:5d not enumerated before the window (the driver had not attached it) and enumerated after it:
    each of its ~97 counters was a failed verdict measured "gone". Its gpu.present accounts for them: one
    verdict for the GPU, failed (a GPU changed under the check), measured "appeared"."""
    node = counted(h100_node())
    bus = buses(node)
    before = snap(monkeypatch, without(node, node["gpus"][3]["bus_id"]), 0.0)
    j = judge(delta(before, snap(monkeypatch, node, 60.0)))
    assert [(e.device, e.what) for e in j.vanished] == [(f"GPU3 ({bus[3]})", "gpu.present")], j.vanished[:3]
    out = item_verdicts("c", {"gpu-node": j}, ["gpu-node"])
    assert [(v.measured, v.passed, v.subject) for v in out] == [("appeared", False, f"gpu-node GPU3 ({bus[3]})")]
    assert "appeared during the window" in out[0].detail
