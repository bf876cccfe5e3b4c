"""The watch of a burn: a background thread that samples, at a fixed interval, what the hardware does under
load. On a GPU (NVML, by the rank's PCI bus id): temperature, SM and memory clocks, power and the clock
event reasons (NVML API reference, nvmlDeviceGetCurrentClocksEventReasons). On a CPU rank, what Linux
exposes: the rank's CPUs' frequency (cpufreq, else /proc/cpuinfo), the hottest thermal zone, and x86
thermal throttle counts. A sample that fails is kept as an error, never as a zero. No torch here."""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

# nvmlClocksEventReason* bits, named as nvidia-smi prints them
REASONS = {0x1: "GPU Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap", 0x8: "HW Slowdown",
           0x10: "Sync Boost", 0x20: "SW Thermal Slowdown", 0x40: "HW Thermal Slowdown",
           0x80: "HW Power Brake Slowdown", 0x100: "Display Clock Setting"}
# Slowdowns from outside the workload (clustercheck.probes.throttle.BAD_REASONS): time under them is throttled
BAD = 0x8 | 0x20 | 0x40 | 0x80
CPU_THROTTLE = "thermal throttle events (x86 core/package throttle counts)"


@dataclass(frozen=True)
class Sample:
    t: float                          # time.monotonic()
    temp_c: float | None = None
    sm_mhz: float | None = None       # GPU SM clock, or the mean frequency of the rank's CPUs
    mem_mhz: float | None = None
    power_w: float | None = None
    reasons: int | None = None        # GPU clock event reasons (bitmask)
    throttle_count: int | None = None  # CPU: thermal throttle events so far


@dataclass
class Watch:
    """Samples `read()` now and every `interval` seconds until `stop()`."""

    interval: float
    read: Callable[[], Sample]
    samples: list[Sample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0  # CPU time the sampling thread used: what the watch took from the load

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="clustercheck-watch", daemon=True)

    def _sample(self) -> None:
        try:
            self.samples.append(self.read())
        except Exception as exc:  # an NVML or sysfs failure: kept, and the watch goes on
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _run(self) -> None:
        start = time.thread_time()
        self._sample()
        while not self._stop.wait(self.interval):
            self._sample()
        self.cpu_s = time.thread_time() - start

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> Watch:
        self._stop.set()
        self._thread.join()
        self._sample()  # the state at the end of the load
        return self


def gpu_reader(bus_id: str) -> Callable[[], Sample]:
    """NVML readings of the GPU at `bus_id`; raises (pynvml.NVMLError) when NVML cannot start or find it."""
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons  # the older name, drivers before 535

    def read() -> Sample:
        return Sample(time.monotonic(), float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                      float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                      float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                      pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0, int(reasons(h)))
    return read


def cpu_reader(cpus: frozenset[int], root: Path | None = None, thermal_root: Path | None = None,
               cpuinfo: Path | None = None) -> Callable[[], Sample]:
    """Readings of the rank's CPUs. The files are found once, here: a sample only reads them (a third of
    the cost of listing sysfs each time, which the load would pay at every sample). A file that
    vanishes or cannot be read makes the sample an error, never a zero."""
    from clustercheck.counters import sysfs

    root, thermal_root, cpuinfo = root or sysfs.CPUS, thermal_root or sysfs.THERMAL, cpuinfo or sysfs.CPUINFO

    def cpu_of(path: Path, up: int) -> int:
        return int(path.parents[up].name[3:])

    freq = sorted((p for p in root.glob("cpu[0-9]*/cpufreq/scaling_cur_freq") if cpu_of(p, 1) in cpus),
                  key=lambda p: cpu_of(p, 1))
    zones = sorted(thermal_root.glob("thermal_zone*/temp"))
    throttle = sorted(p for p in root.glob("cpu[0-9]*/thermal_throttle/*_throttle_count") if cpu_of(p, 1) in cpus)
    use_cpuinfo = not freq and cpuinfo.exists()  # x86 VMs often have no cpufreq

    def number(path: Path) -> int:
        try:
            with open(path, "rb") as fh:
                return int(fh.read())
        except (OSError, ValueError) as exc:
            raise OSError(f"{path}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}") from None

    def cpuinfo_mhz() -> list[float]:
        with open(cpuinfo, "rb") as fh:
            text = fh.read().decode(errors="replace")
        out, cpu = [], -1
        for line in text.splitlines():
            key, _, value = line.partition(":")
            try:
                if key.startswith("processor"):
                    cpu = int(value)
                elif key.startswith("cpu MHz") and cpu in cpus:
                    out.append(float(value))
            except ValueError:  # "<unknown>", or empty: the sample is an error naming the CPU, never a zero
                raise OSError(f"{cpuinfo}: {key.strip()!r} of cpu{cpu} is not a number: {value.strip()[:40]!r}"
                              ) from None
        return out

    def read() -> Sample:
        mhz = [number(p) / 1000.0 for p in freq] if freq else cpuinfo_mhz() if use_cpuinfo else []
        temps = [number(p) / 1000.0 for p in zones]
        counts = [number(p) for p in throttle]
        return Sample(time.monotonic(), max(temps, default=None), statistics.fmean(mhz) if mhz else None,
                      throttle_count=sum(counts) if counts else None)
    return read


def summary(samples: list[Sample], errors: list[str], cpu_s: float | None = None) -> dict[str, Any]:
    """What the watch saw: maxima, clock spread and drop (1 - lowest / highest clock sampled), and the
    time spent under each clock event reason (each interval counted by the reasons at its start)."""
    def values(name: str) -> list[float]:
        return [v for s in samples if (v := getattr(s, name)) is not None]

    clocks = values("sm_mhz")
    out: dict[str, Any] = {"samples": len(samples), "errors": errors[:5], "error_count": len(errors), "cpu_s": cpu_s,
                           "temp_max": max(values("temp_c"), default=None),
                           "power_max_w": max(values("power_w"), default=None),
                           "mem_mhz_min": min(values("mem_mhz"), default=None),
                           "clock_mhz_min": min(clocks, default=None), "clock_mhz_max": max(clocks, default=None),
                           "clock_mhz_median": statistics.median(clocks) if clocks else None,
                           "clock_drop": 1 - min(clocks) / max(clocks) if clocks and max(clocks) > 0 else None}
    pairs = list(zip(samples, samples[1:]))
    if samples and all(s.reasons is not None for s in samples):
        by_reason: dict[str, float] = {}
        throttled = 0.0
        for a, b in pairs:
            dt = b.t - a.t
            for bit, name in REASONS.items():
                if (a.reasons or 0) & bit:
                    by_reason[name] = by_reason.get(name, 0.0) + dt
            throttled += dt if (a.reasons or 0) & BAD else 0.0
        out.update(throttled_s=throttled, reasons=by_reason)
    elif samples and all(s.throttle_count is not None for s in samples):
        rose = sum(b.t - a.t for a, b in pairs if (b.throttle_count or 0) > (a.throttle_count or 0))
        out.update(throttled_s=rose, reasons={CPU_THROTTLE: rose} if rose else {})
    else:  # nothing says whether the clocks were held back: unknown, not zero
        out.update(throttled_s=None, reasons={})
    return out
