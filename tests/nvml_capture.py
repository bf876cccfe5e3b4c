"""Scenarios for the stand-in pynvml (tests/nvml_standin/), built from real captures: the eight GPUs of
an H100 SXM5 node's `nvidia-smi -a` (name, bus id, PCI device id, Module Id, UUID, serial, VBIOS, driver,
CUDA) and the NV18
links of an 8 x H100 `nvidia-smi topo -m`. Tests then take a GPU away, take a link down or make one
NVML call fail the way NVML reports it."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from clustercheck.probes import nvsmi
from evidence import text

STANDIN = Path(__file__).resolve().parent / "nvml_standin"
H100_8 = "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"
H100_TOPO = "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt"


def h100_node() -> dict[str, Any]:
    report = nvsmi.parse(text("nvidia-smi-q", H100_8))
    cell = re.search(r"\tNV(\d+)\t", text("nvidia-smi-topo", H100_TOPO))
    assert cell is not None
    major, minor = (report.head("CUDA Version") or "").split(".")
    gpus = []
    for g in report.gpus:
        device_id, module = g.get("PCI/Device Id"), g.get("Platform Info/Module Id")
        assert device_id and module
        gpus.append({"name": g.product, "bus_id": g.bus_id, "device_id": int(device_id, 16),
                     "module_id": int(module), "links": int(cell.group(1)), "uuid": g.get("GPU UUID"),
                     "serial": g.get("Serial Number"), "vbios": g.get("VBIOS Version")})
    return {"driver": report.head("Driver Version"), "cuda": int(major) * 1000 + int(minor) * 10, "gpus": gpus}


def without(scenario: dict[str, Any], bus_id: str) -> dict[str, Any]:
    """The node with the GPU at `bus_id` gone: the driver did not attach it, NVML renumbers the rest."""
    out = copy.deepcopy(scenario)
    out["gpus"] = [g for g in out["gpus"] if g["bus_id"] != bus_id]
    assert len(out["gpus"]) == len(scenario["gpus"]) - 1
    return out


def failing(scenario: dict[str, Any], index: int, function: str, code: int) -> dict[str, Any]:
    """GPU `index` answers `code` to the C function `function` ("*": every call)."""
    out = copy.deepcopy(scenario)
    out["gpus"][index]["fail"] = {function: code}
    return out


def link_down(scenario: dict[str, Any], index: int, link: int) -> dict[str, Any]:
    out = copy.deepcopy(scenario)
    out["gpus"][index]["down_links"] = [link]
    return out


def in_process(monkeypatch: pytest.MonkeyPatch, scenario: dict[str, Any]) -> ModuleType:
    """The stand-in as this process's pynvml, answering from `scenario`."""
    spec = importlib.util.spec_from_file_location("pynvml", STANDIN / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", module)  # pynvml's source looks itself up there
    spec.loader.exec_module(module)
    module.use(scenario)
    return module


def for_subprocesses(monkeypatch: pytest.MonkeyPatch, scenario: dict[str, Any], path: Path) -> None:
    """The stand-in first on PYTHONPATH for a controller started from here and the ranks it starts."""
    path.write_text(json.dumps(scenario))
    monkeypatch.setenv("NVML_STANDIN", str(path))
    monkeypatch.setenv("PYTHONPATH", str(STANDIN))


def link_failing(scenario: dict[str, Any], index: int, link: int, function: str, code: int) -> dict[str, Any]:
    """GPU `index` answers `code` to the C function `function` about link `link` only."""
    out = copy.deepcopy(scenario)
    out["gpus"][index].setdefault("link_fail", {}).setdefault(str(link), {})[function] = code
    return out
