"""pynvml at the NVML library boundary, for machines without an NVIDIA driver.

This module *is* the real pynvml (nvidia-ml-py): its source runs here unchanged, so its constants,
structs, error classes and every wrapper are the real ones. Only `nvmlLib`, pynvml's ctypes handle on
libnvidia-ml.so.1, is replaced: a Python object whose functions answer as the C library does (NVML API
reference: return codes, out-parameters) from a scenario built from a captured `nvidia-smi -q`
(tests/nvml_capture.py). A function the scenario does not cover is absent, as in an older library:
pynvml raises NVML_ERROR_FUNCTION_NOT_FOUND for it.

Put this directory first on PYTHONPATH and name the scenario (JSON) in NVML_STANDIN; ranks started by
the controller inherit both.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_spec = importlib.machinery.PathFinder.find_spec(
    "pynvml", [p for p in sys.path if Path(p or ".").resolve() != _HERE])
assert _spec is not None and _spec.loader is not None and _spec.origin, "nvidia-ml-py is not installed"
exec(compile(_spec.loader.get_source("pynvml"), _spec.origin, "exec"))  # type: ignore[attr-defined]

_SUCCESS = 0
_INVALID_ARGUMENT = 2  # NVML_ERROR_INVALID_ARGUMENT: a link index past the GPU's last link
_NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED: the GPU has no such feature
_NOT_FOUND = 6  # NVML_ERROR_NOT_FOUND: no GPU at that PCI bus id


class _Library:
    """The C functions clustercheck's NVML reading calls. Scenario: {"driver", "cuda" (e.g. 12070),
    "init_error" (a code nvmlInitWithFlags returns), "count_error" (one nvmlDeviceGetCount_v2 returns), "gpus": [{"name", "bus_id", "device_id" (the
    32-bit PCI id), "module_id", "links", "down_links", "fail": {C function name or "*": code},
    "link_fail": {"<link>": {C function name: code}} (one link's state, capability or error counters)}]}."""

    def __init__(self, scenario: dict[str, Any]) -> None:
        self.scenario = scenario
        self.gpus: list[dict[str, Any]] = scenario["gpus"]
        self.handles = [struct_c_nvmlDevice_t() for _ in self.gpus]  # noqa: F821 (from pynvml's source)

    def _gpu(self, handle: Any) -> int:
        address = ctypes.addressof(handle.contents)
        return next(i for i, h in enumerate(self.handles) if ctypes.addressof(h) == address)

    def _fails(self, index: int, fn: str, link: int | None = None) -> int:
        fail = self.gpus[index].get("fail", {})
        if link is not None and (code := self.gpus[index].get("link_fail", {}).get(str(link), {}).get(fn)):
            return int(code)
        return int(fail.get(fn, fail.get("*", _SUCCESS)))

    def nvmlInitWithFlags(self, flags: int) -> int:
        return int(self.scenario.get("init_error", _SUCCESS))

    def nvmlShutdown(self) -> int:
        return _SUCCESS

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        if code := int(self.scenario.get("count_error", _SUCCESS)):
            return code
        count._obj.value = len(self.gpus)
        return _SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        i = index.value
        if i >= len(self.gpus):
            return _INVALID_ARGUMENT
        if code := self._fails(i, "nvmlDeviceGetHandleByIndex_v2"):
            return code
        device._obj.contents = self.handles[i]
        return _SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, handle: Any, info: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetPciInfo_v3"):
            return code
        gpu, pci = self.gpus[i], info._obj
        domain, bus, rest = gpu["bus_id"].split(":")
        pci.busId = gpu["bus_id"].encode()
        pci.busIdLegacy = gpu["bus_id"][4:].encode()
        pci.domain, pci.bus, pci.device = int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
        pci.pciDeviceId = gpu["device_id"]
        return _SUCCESS

    def nvmlDeviceGetName(self, handle: Any, name: Any, size: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetName"):
            return code
        name.value = self.gpus[i]["name"].encode()
        return _SUCCESS

    def _text(self, handle: Any, fn: str, key: str, out: Any) -> int:
        """A string query (UUID, serial, VBIOS): NOT_SUPPORTED where the scenario's GPU has no such field."""
        code, value = self._value(handle, fn, key)
        if code == _SUCCESS and value is None:
            return _NOT_SUPPORTED
        if code == _SUCCESS:
            out.value = str(value).encode()
        return code

    def nvmlDeviceGetUUID(self, handle: Any, uuid: Any, size: Any) -> int:
        return self._text(handle, "nvmlDeviceGetUUID", "uuid", uuid)

    def nvmlDeviceGetSerial(self, handle: Any, serial: Any, size: Any) -> int:
        return self._text(handle, "nvmlDeviceGetSerial", "serial", serial)

    def nvmlDeviceGetVbiosVersion(self, handle: Any, version: Any, size: Any) -> int:
        return self._text(handle, "nvmlDeviceGetVbiosVersion", "vbios", version)

    def nvmlDeviceGetModuleId(self, handle: Any, module: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetModuleId"):
            return code
        module._obj.value = self.gpus[i]["module_id"]
        return _SUCCESS

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int, active: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetNvLinkState", link):
            return code
        if link >= self.gpus[i]["links"]:
            return _INVALID_ARGUMENT
        active._obj.value = 0 if link in self.gpus[i].get("down_links", ()) else 1
        return _SUCCESS

    def nvmlDeviceGetNvLinkCapability(self, handle: Any, link: int, capability: int, result: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetNvLinkCapability", link):
            return code
        if link >= self.gpus[i]["links"]:
            return _INVALID_ARGUMENT
        result._obj.value = 1
        return _SUCCESS

    def nvmlSystemGetDriverVersion(self, version: Any, size: Any) -> int:
        version.value = self.scenario["driver"].encode()
        return _SUCCESS

    def nvmlSystemGetCudaDriverVersion(self, version: Any) -> int:
        version._obj.value = self.scenario["cuda"]
        return _SUCCESS

    # Counters and the burn watch (clustercheck.counters, clustercheck.measure.burn). Per GPU, optional:
    # "ecc": {"corrected", "uncorrected"} (volatile counts; None: NOT_SUPPORTED for that type alone), "remap":
    # [correctable, uncorrectable, pending, failure], "retired": {"sbe", "dbe", "pending"}, "nvlink_errors":
    # {"<link>": [replay, recovery, crc_flit, crc_data, ecc_data]} (links not named count 0), "watch": {"temp",
    # "sm_mhz", "mem_mhz", "max_sm_mhz", "power_mw", "reasons"}. A key the GPU lacks answers
    # NVML_ERROR_NOT_SUPPORTED, as a GPU without the feature.

    def _value(self, handle: Any, fn: str, key: str) -> tuple[int, Any]:
        i = self._gpu(handle)
        if code := self._fails(i, fn):
            return code, None
        if key not in self.gpus[i]:
            return _NOT_SUPPORTED, None
        return _SUCCESS, self.gpus[i][key]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: Any, counter_type: Any, count: Any) -> int:
        code, ecc = self._value(handle, "nvmlDeviceGetTotalEccErrors", "ecc")
        if not code:
            if (value := ecc["corrected" if error_type.value == 0 else "uncorrected"]) is None:
                return _NOT_SUPPORTED  # one error type NVML will not count
            count._obj.value = value
        return code

    def nvmlDeviceGetRemappedRows(self, handle: Any, corr: Any, unc: Any, pending: Any, failure: Any) -> int:
        code, rows = self._value(handle, "nvmlDeviceGetRemappedRows", "remap")
        if not code:
            for out, value in zip((corr, unc, pending, failure), rows):
                out._obj.value = value
        return code

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: Any, count: Any, pages: Any) -> int:
        code, retired = self._value(handle, "nvmlDeviceGetRetiredPages", "retired")
        if not code:
            n = retired["sbe" if cause.value == 0 else "dbe"]
            count._obj.value = n
            for k in range(n if pages is not None else 0):
                pages[k] = 0x1000 * (k + 1)
        return code

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Any, pending: Any) -> int:
        code, retired = self._value(handle, "nvmlDeviceGetRetiredPagesPendingStatus", "retired")
        if not code:
            pending._obj.value = retired.get("pending", 0)
        return code

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: Any, link: int, counter: int, value: Any) -> int:
        i = self._gpu(handle)
        if code := self._fails(i, "nvmlDeviceGetNvLinkErrorCounter", link):
            return code
        if link >= self.gpus[i]["links"]:
            return _INVALID_ARGUMENT
        value._obj.value = self.gpus[i].get("nvlink_errors", {}).get(str(link), [0] * 5)[counter]
        return _SUCCESS

    def nvmlDeviceGetHandleByPciBusId_v2(self, bus: Any, device: Any) -> int:
        wanted = bus.value.decode().lower()[-12:]  # domain widths differ (0000: or 00000000:)
        for i, gpu in enumerate(self.gpus):
            if gpu["bus_id"].lower().endswith(wanted):
                if code := self._fails(i, "nvmlDeviceGetHandleByPciBusId_v2"):
                    return code
                device._obj.contents = self.handles[i]
                return _SUCCESS
        return _NOT_FOUND

    def _watch(self, handle: Any, fn: str, key: str, out: Any) -> int:
        code, watch = self._value(handle, fn, "watch")
        if not code:
            out._obj.value = watch[key]
        return code

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: Any, temp: Any) -> int:
        return self._watch(handle, "nvmlDeviceGetTemperature", "temp", temp)

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: Any, mhz: Any) -> int:
        return self._watch(handle, "nvmlDeviceGetClockInfo", "sm_mhz" if clock.value == 1 else "mem_mhz", mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock: Any, mhz: Any) -> int:
        return self._watch(handle, "nvmlDeviceGetMaxClockInfo", "max_sm_mhz", mhz)

    def nvmlDeviceGetPowerUsage(self, handle: Any, milliwatts: Any) -> int:
        return self._watch(handle, "nvmlDeviceGetPowerUsage", "power_mw", milliwatts)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any, reasons: Any) -> int:
        return self._watch(handle, "nvmlDeviceGetCurrentClocksEventReasons", "reasons", reasons)


def use(scenario: dict[str, Any]) -> None:
    """Answer from `scenario` from now on (in-process tests)."""
    global nvmlLib
    nvmlLib = _Library(scenario)
    _nvmlGetFunctionPointer_cache.clear()  # noqa: F821 (from pynvml's source)


if os.environ.get("NVML_STANDIN"):
    use(json.loads(Path(os.environ["NVML_STANDIN"]).read_text()))
