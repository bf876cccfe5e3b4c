"""GPU counters through NVML: the real pynvml over the stand-in library (tests/nvml_standin/) answering
from the real 8 x H100 SXM5 capture (tests/nvml_capture.py), with counter values set per scenario. A counter
that rose between snapshots fails, naming GPU (bus id), link and delta; a GPU lost during the window is a
failed verdict; an NVML error is an error, never a zero."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from clustercheck.counters import Snapshot, delta, judge
from clustercheck.errors import HarnessError
from clustercheck.judging.windows import item_verdicts, verdicts
from clustercheck.counters.nvml_counters import read
from clustercheck import nvml
from nvml_capture import failing, h100_node, in_process, link_failing, without

GPU_IS_LOST, UNKNOWN, LIBRARY_NOT_FOUND, NOT_SUPPORTED = 15, 999, 12, 3  # nvml.h return codes
INVALID_ARGUMENT, FUNCTION_NOT_FOUND = 2, 13


def counted(node: dict[str, Any]) -> dict[str, Any]:
    """Every GPU with ECC and a row remapper (as an H100 has); no retired-page counters (Ampere and later
    report row remapping instead, so NVML answers NOT_SUPPORTED)."""
    out = copy.deepcopy(node)
    for g in out["gpus"]:
        g["ecc"] = {"corrected": 0, "uncorrected": 0}
        g["remap"] = [0, 0, 0, 0]
    return out


def snap(monkeypatch: pytest.MonkeyPatch, scenario: dict[str, Any], taken: float) -> Snapshot:
    r = read(in_process(monkeypatch, scenario))
    return Snapshot("gpu-node", taken, r.counters, r.gauges, r.errors, r.notes)


def test_every_gpu_reports_ecc_remap_and_per_link_nvlink_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    r = read(in_process(monkeypatch, counted(h100_node())))
    assert not r.errors
    names = {c.name for c in r.counters}
    assert {"gpu.ecc.corrected", "gpu.ecc.uncorrected", "gpu.remap.pending", "gpu.remap.failure",
            "nvlink.replay", "nvlink.crc_flit"} <= names and not any(n.startswith("gpu.retired") for n in names)
    assert sum(c.name == "nvlink.crc_data" for c in r.counters) == 8 * 18
    assert {c.device for c in r.counters if c.name == "gpu.ecc.uncorrected"} == {
        f"GPU{i} ({g['bus_id'][4:].lower()})" for i, g in enumerate(h100_node()["gpus"])}
    assert sum("nvmlDeviceGetRetiredPages not supported" in n for n in r.notes) == 8


def test_an_ecc_error_and_nvlink_crc_errors_in_the_window_fail_naming_gpu_and_link(
        monkeypatch: pytest.MonkeyPatch) -> None:
    node = counted(h100_node())
    before = snap(monkeypatch, node, 100.0)
    node["gpus"][3]["ecc"]["uncorrected"] = 1
    node["gpus"][3]["remap"] = [0, 1, 1, 0]  # the driver remaps the row on the next reset: pending
    node["gpus"][5]["nvlink_errors"] = {"7": [0, 0, 4, 0, 0]}
    node["gpus"][6]["ecc"]["corrected"] = 12
    j = judge(delta(before, snap(monkeypatch, node, 160.0)))
    gpu3, gpu5 = f"GPU3 ({node['gpus'][3]['bus_id'][4:].lower()})", f"GPU5 ({node['gpus'][5]['bus_id'][4:].lower()})"
    assert sorted((f.increase.name, f.increase.device, f.increase.amount) for f in j.failed) == [
        ("gpu.ecc.uncorrected", gpu3, 1), ("gpu.remap.pending", gpu3, 1), ("gpu.remap.uncorrectable", gpu3, 1),
        ("nvlink.crc_flit", f"{gpu5} link 7", 4)]
    assert [f.passed for f in j.findings if f.increase.name == "gpu.ecc.corrected"] == [True]  # 12 <= 1000
    assert {v.subject for v in verdicts(j, "burn") if not v.passed} == {f"gpu-node {gpu3}", f"gpu-node {gpu5} link 7"}


def test_a_gpu_lost_during_the_window_is_a_failed_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    j = judge(delta(before, snap(monkeypatch, failing(node, 2, "*", GPU_IS_LOST), 30.0)))
    gpu2 = gpu_name(node, 2)  # lost before NVML gave its PCI info: named by the bus id read before the window
    assert {(e.reader, e.device, e.kind) for e in j.vanished} == {("nvml", gpu2, "vanished")}
    assert "NVML_ERROR_GPU_IS_LOST" in j.vanished[0].error and not j.harness_errors
    assert [(v.subject, v.passed) for v in verdicts(j, "burn")] == [(f"gpu-node {gpu2}", False)]


def test_an_nvml_error_on_one_counter_is_an_error_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    node = counted(h100_node())
    r = read(in_process(monkeypatch, failing(node, 4, "nvmlDeviceGetTotalEccErrors", UNKNOWN)))
    (err,) = {(e.device, e.what, e.kind) for e in r.errors}
    assert err[0].startswith("GPU4 (") and err[1:] == ("nvmlDeviceGetTotalEccErrors", "unreadable")
    assert not any(c.name.startswith("gpu.ecc") and c.device.startswith("GPU4 ") for c in r.counters)


def test_a_node_without_a_driver_has_a_note_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    r = read(in_process(monkeypatch, {**h100_node(), "init_error": LIBRARY_NOT_FOUND}))
    assert not r.counters and not r.errors and "no NVIDIA driver" in r.notes[0]


def test_a_link_without_a_state_does_not_hide_the_errors_of_the_links_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Link 2 answers NOT_SUPPORTED for its state (disabled); its capability says it exists. The walk used
    to stop there, so link 7's CRC errors were never read and the window passed."""
    node = link_failing(counted(h100_node()), 0, 2, "nvmlDeviceGetNvLinkState", NOT_SUPPORTED)
    before = snap(monkeypatch, node, 0.0)
    gpu0 = f"GPU0 ({node['gpus'][0]['bus_id'][4:].lower()})"
    assert {c.device for c in before.counters if c.name == "nvlink.replay" and c.device.startswith(gpu0)} == {
        f"{gpu0} link {n}" for n in range(18)}
    nv = in_process(monkeypatch, node)
    nv.nvmlInit()
    assert nvml.read(nv).gpus[0].nvlinks == 18  # the links probe counts the same links
    node["gpus"][0]["nvlink_errors"] = {"7": [500, 0, 0, 0, 0]}
    j = judge(delta(before, snap(monkeypatch, node, 60.0)))
    assert [(f.increase.name, f.increase.device, f.increase.amount) for f in j.failed] == [
        ("nvlink.replay", f"{gpu0} link 7", 500)]


def gpu_name(node: dict[str, Any], i: int) -> str:
    return f"GPU{i} ({node['gpus'][i]['bus_id'][4:].lower()})"


def test_an_nvlink_counter_nvml_will_not_read_is_not_judged_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Link 4 of GPU1 answers NOT_SUPPORTED to its error counters: they used to be left out with no note, and
    the window passed; the item is now an error naming each counter and the link."""
    node = link_failing(counted(h100_node()), 1, 4, "nvmlDeviceGetNvLinkErrorCounter", NOT_SUPPORTED)
    j = judge(delta(snap(monkeypatch, node, 0.0), snap(monkeypatch, node, 60.0)))
    gpu1 = gpu_name(node, 1)
    assert {(e.counter, e.device) for e in j.harness_errors} == {
        (f"nvlink.{n}", f"{gpu1} link 4") for n in ("replay", "recovery", "crc_flit", "crc_data", "ecc_data")}
    with pytest.raises(HarnessError) as raised:
        item_verdicts("burn", {"gpu-node": j}, ["gpu-node"])
    assert str(raised.value) == (
        f"burn: counters of gpu-node could not be judged: not judged: nvlink.replay, nvlink.recovery, "
        f"nvlink.crc_flit, nvlink.crc_data, nvlink.ecc_data on {gpu1} link 4 (nvmlDeviceGetNvLinkErrorCounter: "
        f"NVML_ERROR_NOT_SUPPORTED (Not Supported))")


def test_nvlink_counters_a_gpu_has_on_none_of_its_links_are_a_note_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A counter NVML answers NOT_SUPPORTED on every link of a GPU is one the GPU does not have: a note, as a
    GPU without ECC is; on one link only it stays not judged (above)."""
    node = counted(h100_node())
    for link in range(node["gpus"][1]["links"]):
        node = link_failing(node, 1, link, "nvmlDeviceGetNvLinkErrorCounter", NOT_SUPPORTED)
    before = snap(monkeypatch, node, 0.0)
    gpu1, links = gpu_name(node, 1), node["gpus"][1]["links"]
    assert f"{gpu1}: nvlink.crc_data not supported on any of its {links} link(s)" in before.notes
    j = judge(delta(before, snap(monkeypatch, node, 60.0)))
    assert j.harness_errors == ()  # every --counters item on such a GPU was an error before
    assert item_verdicts("burn", {"gpu-node": j}, ["gpu-node"]) == []


def test_a_gpu_without_ecc_is_a_note_and_one_ecc_count_missing_is_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    off = counted(h100_node())
    for g in off["gpus"]:  # both counts NOT_SUPPORTED on every GPU of the model: no ECC (or it is off)
        del g["ecc"]
    assert f"{gpu_name(off, 2)}: nvmlDeviceGetTotalEccErrors not supported (no ECC, or ECC off)" in \
        snap(monkeypatch, off, 0.0).notes
    node = counted(h100_node())
    node["gpus"][5]["ecc"]["uncorrected"] = None  # one count NOT_SUPPORTED beside the other: a failed read
    before = snap(monkeypatch, node, 0.0)
    j = judge(delta(before, snap(monkeypatch, node, 60.0)))
    assert [(e.counter, e.device) for e in j.harness_errors] == [("gpu.ecc.uncorrected", gpu_name(node, 5))]
    assert j.notes == before.notes  # carried through Delta and Judgement
    with pytest.raises(HarnessError, match=rf"not judged: gpu\.ecc\.uncorrected on GPU5 \(0000:[0-9a-f:.]+\) "
                                           r"\(nvmlDeviceGetTotalEccErrors: NVML_ERROR_NOT_SUPPORTED"):
        item_verdicts("burn", {"gpu-node": j}, ["gpu-node"])


@pytest.mark.parametrize("code, name", [(INVALID_ARGUMENT, "NVML_ERROR_INVALID_ARGUMENT"),
                                        (FUNCTION_NOT_FOUND, "NVML_ERROR_FUNCTION_NOT_FOUND")])
def test_ecc_nvml_answers_with_invalid_argument_or_function_not_found_is_not_judged_never_a_note(
        monkeypatch: pytest.MonkeyPatch, code: int, name: str) -> None:
    """Both used to read as "not supported", a note, so the GPU's ECC was left out of the window unsaid."""
    node = failing(counted(h100_node()), 4, "nvmlDeviceGetTotalEccErrors", code)
    r = read(in_process(monkeypatch, node))
    assert not any("nvmlDeviceGetTotalEccErrors" in n for n in r.notes)
    assert {e.text().split(" (")[0] for e in r.errors} == {
        f"not judged: gpu.ecc.{k} on GPU4" for k in ("corrected", "uncorrected")}
    assert all(name in e.error and e.device == gpu_name(node, 4) for e in r.errors)


def test_a_window_that_failed_and_could_not_judge_a_counter_fails_naming_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """An uncorrected ECC error beside NVLink counters NVML would not read: the error must not hide the
    failure (an errored item does not exclude its node), nor the failure what was not judged."""
    node = link_failing(counted(h100_node()), 1, 4, "nvmlDeviceGetNvLinkErrorCounter", NOT_SUPPORTED)
    before = snap(monkeypatch, node, 0.0)
    node["gpus"][3]["ecc"]["uncorrected"] = 2
    got = item_verdicts("burn", {"gpu-node": judge(delta(before, snap(monkeypatch, node, 60.0)))}, ["gpu-node"])
    assert [(v.metric, v.measured, v.passed) for v in got] == [
        ("counters", "not judged", False), ("gpu.ecc.uncorrected", 2.0, False)]
    assert got[0].detail is not None and got[0].detail.startswith(
        f"not judged: nvlink.replay, nvlink.recovery, nvlink.crc_flit, nvlink.crc_data, nvlink.ecc_data on "
        f"{gpu_name(node, 1)} link 4 (")


def test_a_gpu_with_no_counters_gone_after_the_window_is_a_failed_verdict_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PCIe GPUs without ECC or NVLink: NVML answers NOT_SUPPORTED for every counter, so a GPU had none to
    miss. GPU3 no longer enumerated after the window (NVML renumbers the rest) used to pass unnoticed; its
    presence is now a counter, and only it is named, by bus id, not the GPUs renumbered after it."""
    node = h100_node()
    for g in node["gpus"]:
        g["links"] = 0
    before = snap(monkeypatch, node, 0.0)
    assert not before.errors and sum(c.name == "gpu.present" for c in before.counters) == 8
    j = judge(delta(before, snap(monkeypatch, without(node, node["gpus"][3]["bus_id"]), 60.0)))
    gpu3 = gpu_name(node, 3)
    assert [(e.device, e.what, e.kind) for e in j.vanished] == [(gpu3, "gpu.present", "vanished")]
    assert not j.harness_errors
    assert [(v.subject, v.passed) for v in item_verdicts("burn", {"gpu-node": j}, ["gpu-node"])] == [
        (f"gpu-node {gpu3}", False)]


def test_gpus_renumbered_after_a_lost_one_keep_their_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU5's ECC count rises while GPU3 goes: GPU5 is GPU4 after the window, the same GPU by bus id."""
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    gone = without(node, node["gpus"][3]["bus_id"])
    gone["gpus"][4]["ecc"]["uncorrected"] = 1
    j = judge(delta(before, snap(monkeypatch, gone, 60.0)))
    assert {e.device for e in j.vanished} == {gpu_name(node, 3)} and not j.harness_errors
    assert [(f.increase.name, f.increase.device) for f in j.failed] == [("gpu.ecc.uncorrected", gpu_name(node, 5))]


def test_one_gpu_lacking_a_feature_its_identical_siblings_have_is_not_judged_not_a_note(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight H100s; GPU3 alone answers NOT_SUPPORTED for ECC and the row remapper. An H100 has both, so it
    read neither: that used to be the note 'no row remapper: before Ampere' and the item passed."""
    node = counted(h100_node())
    del node["gpus"][3]["ecc"], node["gpus"][3]["remap"]
    before = snap(monkeypatch, node, 0.0)
    gpu3 = gpu_name(node, 3)
    assert not any(n.startswith(gpu3) and "RetiredPages" not in n for n in before.notes)
    assert sum("nvmlDeviceGetRetiredPages not supported" in n for n in before.notes) == 8  # none of them has it
    j = judge(delta(before, snap(monkeypatch, node, 60.0)))
    with pytest.raises(HarnessError) as raised:
        item_verdicts("burn", {"gpu-node": j}, ["gpu-node"])
    assert (f"not judged: gpu.ecc.corrected, gpu.ecc.uncorrected on {gpu3} (nvmlDeviceGetTotalEccErrors: "
            f"NVML_ERROR_NOT_SUPPORTED") in str(raised.value)
    assert (f"not judged: gpu.remap.correctable, gpu.remap.uncorrectable, gpu.remap.pending, gpu.remap.failure "
            f"on {gpu3} (nvmlDeviceGetRemappedRows: NVML_ERROR_NOT_SUPPORTED") in str(raised.value)


def test_a_feature_every_gpu_of_a_model_lacks_stays_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    """ECC off on all eight: a note per GPU, not an error; one of them lost in the window proves nothing."""
    node = h100_node()
    before = snap(monkeypatch, node, 0.0)
    assert sum("nvmlDeviceGetTotalEccErrors not supported" in n for n in before.notes) == 8
    assert not before.errors
    r = read(in_process(monkeypatch, failing(node, 2, "nvmlDeviceGetTotalEccErrors", GPU_IS_LOST)))
    assert {e.kind for e in r.errors} == {"vanished"}


def test_a_gpu_whose_pci_info_fails_after_the_window_is_not_judged_by_name_never_97_appeared_counters(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU3 answers NVML_ERROR_UNKNOWN to nvmlDeviceGetPciInfo after the window while its uncorrected ECC count
    went 0 -> 5. Its counters used to come as `GPU3`, `GPU3 link N` without a bus id: 97 counters 'appeared
    during the window' (vanished: a hardware FAIL of every link) and the ECC increase was never seen as one.
    With no bus id its counters cannot be matched with those read before the window, so none are given: the
    window is not judged for GPU3, said once by the failed call, and the other GPUs are judged as before."""
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    node["gpus"][3]["ecc"]["uncorrected"] = 5
    node["gpus"][6]["ecc"]["uncorrected"] = 1
    after = snap(monkeypatch, failing(node, 3, "nvmlDeviceGetPciInfo_v3", UNKNOWN), 60.0)
    j = judge(delta(before, after))
    assert not j.vanished
    assert [(e.device, e.what, e.kind) for e in j.harness_errors] == [("GPU3", "nvmlDeviceGetPciInfo", "unreadable")]
    assert [(f.increase.name, f.increase.device) for f in j.failed] == [("gpu.ecc.uncorrected", gpu_name(node, 6))]
    assert not any(c.device == "GPU3" or c.device.startswith("GPU3 ") for c in after.counters)
    got = item_verdicts("burn", {"gpu-node": j}, ["gpu-node"])  # GPU6's failure stands, GPU3 not judged beside it
    assert [(v.metric, v.measured, v.passed) for v in got] == [
        ("counters", "not judged", False), ("gpu.ecc.uncorrected", 1.0, False)]
    assert got[0].detail is not None and "nvml on GPU3: nvmlDeviceGetPciInfo: NVML_ERROR_UNKNOWN" in got[0].detail


def test_two_gpus_lost_after_they_gave_their_pci_info_are_each_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU that falls off the bus between NVML's PCI info and its counters answers NVML_ERROR_GPU_IS_LOST to
    every later call: each call was a `vanished` error of its own, so two GPUs lost failed five times (GPU2:
    ECC, row remapping, NVLink state). Each lost GPU is one failure now, and is asked nothing more."""
    node = counted(h100_node())
    before = snap(monkeypatch, node, 0.0)
    after = copy.deepcopy(node)
    after["gpus"][2]["fail"] = {f: GPU_IS_LOST for f in ("nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
                                                          "nvmlDeviceGetNvLinkState")}
    after["gpus"][5]["fail"] = {f: GPU_IS_LOST for f in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState")}
    j = judge(delta(before, snap(monkeypatch, after, 60.0)))
    assert [(e.device, e.what) for e in j.vanished] == [
        (gpu_name(node, 2), "nvmlDeviceGetTotalEccErrors"), (gpu_name(node, 5), "nvmlDeviceGetRemappedRows")]
    assert not j.harness_errors and not j.failed
