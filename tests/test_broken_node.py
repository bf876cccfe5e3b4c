"""A broken node is judged, not crashed or passed: a GPU missing, a link down or an NVML error on one GPU
still detects as the node's platform, and the versions probe fails the node, naming the GPU (and the
call). Facts come from each node's first rank, so a GPU-less controller never runs a GPU cluster as
`cpu`, and nodes that disagree on their platform are refused in one line naming them.

No GPU here: NVML is the real pynvml over a stand-in library (tests/nvml_standin/) answering from a real
8 x H100 SXM5 `nvidia-smi -a` capture (tests/nvml_capture.py); the `gpu`-marked test reads real NVML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.nvml import NvmlFault
from clustercheck.judging.platform import Facts, detect, detect_nodes, layout, read_facts
from clustercheck.probes import versions
from helpers import write_suite
from nvml_capture import STANDIN, failing, for_subprocesses, h100_node, in_process, link_down, without

REPO = Path(__file__).resolve().parent.parent
THRESHOLDS = REPO / "thresholds"
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST (nvml.h)
GONE = "00000000:9A:00.0"  # module 6 in the capture


def test_seven_of_eight_gpus_is_still_an_h100_node_and_versions_names_the_missing_module(monkeypatch):
    in_process(monkeypatch, without(h100_node(), GONE))
    facts = read_facts()
    assert (facts.gpu_count, facts.pci_device_ids, facts.nvlinks_per_gpu) == (7, (0x2330,), 18)
    assert detect(THRESHOLDS, facts).name == "h100-sxm-8x"
    count = next(v for v in versions.judge(versions.collect(), {"gpu_count": 8}) if v.what == "GPU count")
    assert not count.passed and (count.measured, count.expected) == (7, 8)
    assert "missing: module 6 " in count.detail


def test_a_gpu_the_pci_bus_shows_and_nvml_does_not_list_is_named_by_bus_id(monkeypatch, tmp_path):
    for bus in ("0000:18:00.0", "0000:9a:00.0"):  # sysfs layout: class, vendor, device per function
        (tmp_path / bus).mkdir()
        for name, value in (("class", "0x030200"), ("vendor", "0x10de"), ("device", "0x2330")):
            (tmp_path / bus / name).write_text(value + "\n")
    in_process(monkeypatch, without(h100_node(), GONE))
    facts = read_facts(pci_root=tmp_path)
    inv = versions.Inventory(facts.gpu_count, facts.gpu_names, None, None, None, None, None,
                             tuple(g.bus_id for g in facts.gpus), (), facts.pci_gpus)
    (count, _) = versions.judge(inv, {"gpu_count": 8})
    assert "missing: 0000:9a:00.0 (on the PCI bus, not listed by NVML)" in count.detail


def test_one_link_down_is_still_an_h100_node(monkeypatch):
    in_process(monkeypatch, link_down(h100_node(), 2, 5))
    facts = read_facts()
    assert facts.nvlinks_per_gpu == 18  # links the GPUs have; GPU2 has 17 of them up
    assert [g.nvlinks_active for g in facts.gpus] == [18, 18, 17, 18, 18, 18, 18, 18]
    assert detect(THRESHOLDS, facts).name == "h100-sxm-8x"


def test_an_nvml_error_on_one_gpu_is_a_fact_and_a_failed_verdict_naming_gpu_and_call(monkeypatch):
    in_process(monkeypatch, failing(h100_node(), 3, "nvmlDeviceGetHandleByIndex_v2", GPU_IS_LOST))
    facts = read_facts()
    assert facts.nvml_faults == (NvmlFault("nvmlDeviceGetHandleByIndex", "NVML_ERROR_GPU_IS_LOST", "GPU is lost", 3),)
    assert facts.gpu_count == 8 and len(facts.gpus) == 7
    assert detect(THRESHOLDS, facts).name == "h100-sxm-8x"
    failed = [v for v in versions.judge(versions.collect(), {"gpu_count": 8}) if not v.passed]
    assert [v.line() for v in failed] == [
        "GPU3: NVML: nvmlDeviceGetHandleByIndex failed: NVML_ERROR_GPU_IS_LOST (GPU is lost)"]


def test_a_gpu_lost_after_its_handle_names_its_bus_id(monkeypatch):
    in_process(monkeypatch, failing(h100_node(), 4, "nvmlDeviceGetName", GPU_IS_LOST))
    (fault,) = read_facts().nvml_faults
    assert fault.text() == "GPU4: nvmlDeviceGetName failed: NVML_ERROR_GPU_IS_LOST (GPU is lost); bus id 0000:9a:00.0"


def test_facts_survive_the_trip_from_a_rank(monkeypatch):
    in_process(monkeypatch, failing(h100_node(), 3, "*", GPU_IS_LOST))
    facts = read_facts(torch_gpus=7)
    assert Facts.from_dict(json.loads(json.dumps(facts.as_dict()))) == facts


def _node(name: str, count: int, ids: tuple[int, ...] = (), links: int | None = None, torch: int | None = None) -> Facts:
    return Facts(host=name, gpu_count=count, pci_device_ids=ids, nvlinks_per_gpu=links, torch_gpus=torch)


def test_nodes_that_disagree_on_the_platform_are_refused_in_one_line_naming_them():
    nodes = {f"gpu{i}": _node(f"gpu{i}", 8, (0x2330,), 18) for i in range(1, 4)}
    nodes["gpu4"] = _node("gpu4", 8, (0x2335,), 18)
    with pytest.raises(UserError) as info:
        detect_nodes(THRESHOLDS, nodes)
    assert str(info.value).startswith("the nodes disagree on the platform: h100-sxm-8x on gpu[1-3]; "
                                      "h200-sxm-8x on gpu4;")
    assert "\n" not in str(info.value)
    nodes["gpu4"] = _node("gpu4", 8, (0x26b9,), 0)  # L40S: no hand-written profile, a derived one
    with pytest.raises(UserError, match=r"the nodes disagree on the platform: h100-sxm-8x on gpu\[1-3\]; l40s-8x on gpu4"):
        detect_nodes(THRESHOLDS, nodes)


def test_ranks_that_see_gpus_never_run_as_cpu():
    nodes = {"n1": _node("n1", 0, torch=8), "n2": _node("n2", 0, torch=8)}  # NVML down, CUDA up
    assert layout("auto", None, nodes) == ("nccl", 8)
    with pytest.raises(UserError):
        detect_nodes(THRESHOLDS, nodes)  # 8 GPUs with no device id: no profile, and never cpu
    fewer = {"n1": _node("n1", 8, torch=8), "n2": _node("n2", 7, torch=7)}
    assert layout("auto", None, fewer) == ("nccl", 7)
    with pytest.raises(UserError, match=r"CUDA sees no GPU on node\(s\) n2 "):
        layout("auto", None, {"n1": _node("n1", 8, torch=8), "n2": _node("n2", 8, torch=0)})


# -- end to end: the real plugin, pools and reports ------------------------------------------------

RUN = ("--thresholds", "thresholds", "--cc-out", "out", "-p", "no:cacheprovider", "--backend", "gloo")


@pytest.fixture
def h100_project(project: pytest.Pytester) -> pytest.Pytester:
    for name in ("h100-sxm-8x.yaml", "cpu.yaml"):
        (project.path / "thresholds" / name).write_text((THRESHOLDS / name).read_text())
    (project.path / "suites" / "quick-gate-nvlink8.yaml").write_text(
        (REPO / "suites" / "quick-gate-nvlink8.yaml").read_text())
    return project


def _results(p: pytest.Pytester) -> dict[str, dict]:
    data = json.loads((p.path / "out" / "latest" / "results.json").read_text())
    return {r["name"]: r for r in data["results"]}


def _record(p: pytest.Pytester) -> list[dict]:
    return [json.loads(line) for line in (p.path / "out" / "latest" / "run.jsonl").read_text().splitlines()]


def test_a_node_with_seven_of_eight_gpus_fails_the_quick_gate_and_is_excluded(h100_project, monkeypatch, tmp_path):
    for_subprocesses(monkeypatch, without(h100_node(), GONE), tmp_path / "nvml.json")
    res = h100_project.runpytest_subprocess("suites/quick-gate-nvlink8.yaml", "-k", "versions", *RUN)
    res.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in res.stdout.str() and "Traceback" not in res.stdout.str()
    (result,) = _results(h100_project).values()
    assert result["outcome"] == "failed" and result["check"] == "versions"
    assert "7 GPU(s) (NVIDIA H100 80GB HBM3), platform expects 8; missing: module 6" in result["message"]
    node = result["node"]
    assert (h100_project.path / "out" / "latest" / "exclude.txt").read_text() == f"{node}\n"
    header = _record(h100_project)[0]
    assert header["platform"] == "h100-sxm-8x" and header["platform_detected"] is True


def test_an_nvml_error_fails_the_node_naming_gpu_and_call_instead_of_ending_pytest(h100_project, monkeypatch, tmp_path):
    for_subprocesses(monkeypatch, failing(h100_node(), 3, "nvmlDeviceGetHandleByIndex_v2", GPU_IS_LOST),
                     tmp_path / "nvml.json")
    res = h100_project.runpytest_subprocess("suites/quick-gate-nvlink8.yaml", "-k", "versions", *RUN)
    assert res.ret == 1 and "INTERNALERROR" not in res.stdout.str()
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*GPU3*nvmlDeviceGetHandleByIndex failed: NVML_ERROR_GPU_IS_LOST*"])
    (result,) = _results(h100_project).values()
    assert (h100_project.path / "out" / "latest" / "exclude.txt").read_text() == f"{result['node']}\n"


def _hosts(tmp_path: Path, scenarios: dict[str, dict]) -> tuple[str, ...]:
    """--launcher hosts on this machine, each fake host's ranks with its own NVML scenario; the controller
    itself sees no stand-in, as a login node without GPUs would."""
    for host, scenario in scenarios.items():
        (tmp_path / f"{host}.json").write_text(json.dumps(scenario))
    command = f"env PYTHONPATH={STANDIN} NVML_STANDIN={tmp_path}/{{host}}.json {{python}}"
    return ("--launcher", "hosts", "--hosts", ",".join(scenarios), "--host-command", command)


def test_a_gpu_less_controller_reads_the_platform_from_the_nodes(h100_project, tmp_path):
    hosts = _hosts(tmp_path, {"h1": h100_node(), "h2": without(h100_node(), GONE)})
    res = h100_project.runpytest_subprocess("suites/quick-gate-nvlink8.yaml", "-k", "versions", *RUN, *hosts,
                                            "--ranks", "1")  # a node-scoped check needs no more
    res.assert_outcomes(passed=1, failed=1)
    header = _record(h100_project)[0]
    assert header["platform"] == "h100-sxm-8x" and header["facts"] == header["node_facts"]["h1"]
    assert {n: f["gpu_count"] for n, f in header["node_facts"].items()} == {"h1": 8, "h2": 7}
    assert {n: r["outcome"] for n, r in _results(h100_project).items()} == {"versions[h1]": "passed",
                                                                              "versions[h2]": "failed"}
    assert (h100_project.path / "out" / "latest" / "exclude.txt").read_text() == "h2\n"
    pools = [x for x in _record(h100_project) if x["type"] == "pool"]
    assert len(pools) == 1  # the pool that read the facts ran the check: no extra start


def test_nodes_that_disagree_on_the_platform_end_the_run_before_it_starts(h100_project, tmp_path):
    not_loaded = {"init_error": 9, "gpus": []}  # NVML_ERROR_DRIVER_NOT_LOADED: a node without GPUs
    hosts = _hosts(tmp_path, {"h1": h100_node(), "h2": h100_node(), "h3": not_loaded})
    res = h100_project.runpytest_subprocess("suites/quick-gate-nvlink8.yaml", "-k", "versions", *RUN, *hosts,
                                            "--ranks", "1")
    assert res.ret == 4
    res.stderr.fnmatch_lines(["ERROR: the nodes disagree on the platform: h100-sxm-8x on h[[]1-2]; cpu on h3; *"])
    assert "Traceback" not in res.stderr.str()
    assert not list((h100_project.path / "out").glob(".starting-*"))


@pytest.mark.gpu
def test_real_nvml_facts_are_complete_and_agree_with_cuda():
    import os

    import torch

    facts = read_facts(torch_gpus=torch.cuda.device_count())
    assert facts.nvml_status == "ok" and not facts.nvml_faults
    assert len(facts.gpus) == facts.gpu_count > 0 and facts.pci_device_ids
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert facts.torch_gpus == facts.gpu_count
    assert {g.bus_id for g in facts.gpus} <= set(facts.pci_gpus)  # NVML's bus ids in sysfs's form
    for gpu in facts.gpus:
        assert gpu.nvlinks is not None and gpu.nvlinks_active is not None and gpu.nvlinks >= gpu.nvlinks_active
    count = next(v for v in versions.judge(versions.collect(), {"gpu_count": facts.gpu_count})
                 if v.what == "GPU count")
    assert count.passed


def _ranks_see(count: int, host: str) -> Facts:
    return Facts(host=host, gpu_count=count, torch_gpus=count, pci_device_ids=(0x2330,))


def test_a_node_with_fewer_usable_gpus_fails_so_the_others_gpus_left_unmeasured_are_not_silent():
    """NCCL runs one rank per GPU, as many as the node with the fewest has: that node fails as its own
    item (and is excluded), naming why the others' eighth GPU went unmeasured."""
    from clustercheck.record import exclude
    from clustercheck.judging.platform import short_nodes
    from clustercheck.record.entries import short_node_results
    from clustercheck.judging.verdicts import line

    nodes = {"n1": _ranks_see(8, "n1"), "n2": _ranks_see(7, "n2"), "n3": _ranks_see(8, "n3")}
    backend, per_node = layout("auto", None, nodes)
    assert (backend, per_node) == ("nccl", 7)
    assert short_nodes(nodes, per_node) == {"n2": (7, 8)}
    assert short_nodes(nodes, 8) == {} and short_nodes({"n1": nodes["n1"]}, 8) == {}
    (entry,) = short_node_results(short_nodes(nodes, per_node), per_node)
    assert entry["outcome"] == "failed" and entry["name"] == "gpu-count[n2]"
    assert "ranks see 7 GPU(s) here, 8 on other nodes: the run used 7 rank(s) per node" in entry["message"]
    assert list(exclude.excluded([entry])) == ["n2"]
    assert exclude.untested(["n1", "n2"], [entry]) == ["n1"]  # n1 still needs the run's own items
    assert "usable GPUs" in line(entry["verdicts"][0]) and "8" in line(entry["verdicts"][0])


def test_memory_is_judged_on_the_node_that_has_least_not_on_the_controller():
    from clustercheck.run.session import _least

    nodes = {"n1": Facts(host="n1", gpu_count=0, host_memory=64 << 30),
             "n2": Facts(host="n2", gpu_count=0, host_memory=3 << 30),
             "n3": Facts(host="n3", gpu_count=0)}
    assert _least(nodes, "host_memory") == (3 << 30, "node n2")
    assert _least(nodes, "gpu_memory_free") == (None, "")
    assert Facts.from_dict(nodes["n2"].as_dict()).host_memory == 3 << 30  # survives the trip from a rank
