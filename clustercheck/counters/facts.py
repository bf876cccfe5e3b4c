"""What one node's counter readers found, as frozen facts: counters (monotonic error counts), gauges
(temperature, clock frequency), kernel log lines in a window, and read errors. A reader that could not
read says so with a `ReadError`; it never reports zero. Facts cross the wire as builtins (`as_dict`,
`from_dict`), since snapshots are taken on each node's first rank and judged on the controller."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

# What went wrong with a reading. unreadable: the harness could not read it (permission, a tool missing,
# an NVML call failing); vanished: a counter read before the window is gone after it (a device fell off);
# reset: a counter went down (a driver reload or a reset during the window hides its increase);
# saturated: a counter at the top of its width cannot count further; lost: kernel log lines of the window
# were overwritten before they were read.
ERROR_KINDS = ("unreadable", "vanished", "reset", "saturated", "lost")


@dataclass(frozen=True)
class Counter:
    """A count that only grows while the hardware runs, e.g. `pcie.aer.correctable` of 0000:17:00.0."""

    name: str                               # dotted: pcie.aer.correctable, ib.symbol_error, gpu.ecc.uncorrected
    device: str                             # 0000:17:00.0, mlx5_0/1, GPU0 (0000:18:00.0), GPU0 link 3
    value: int
    parts: tuple[tuple[str, int], ...] = ()  # the breakdown the source gives (AER: Receiver Error 2, ...)

    @property
    def key(self) -> tuple[str, str]:
        return self.name, self.device


@dataclass(frozen=True)
class Gauge:
    """A reading that goes up and down: a temperature, a clock."""

    name: str     # thermal.temp, cpu.mhz
    device: str   # thermal_zone0 (x86_pkg_temp), cpu3
    value: float
    unit: str     # C, MHz


_FAMILIES = {"nvml": ("gpu.", "nvlink.")}  # reader -> the counters it reads, where they are not named after it


@dataclass(frozen=True)
class ReadError:
    reader: str   # pcie.aer, ib, nvml, kernel.log, thermal, cpu.freq
    device: str   # what it was about ("" for the whole node)
    what: str     # the file or call
    error: str    # what happened, in words
    kind: str = "unreadable"  # one of ERROR_KINDS
    counter: str = ""         # the counter it failed to read; "" for everything the reader reads of `device`

    def explains(self, counter: str, device: str) -> bool:
        """Whether this error accounts for `counter` of `device` being missing from a snapshot: an error of the
        whole node (nvmlInit failed) accounts for every counter its reader reads there, never a GPU's counters
        that "vanished" (a hardware failure) where only the harness could not read them; a device's error
        accounts for its own and its ports' (mlx5_1 for mlx5_1/1)."""
        if not self.device and not self.counter:
            return counter.startswith(_FAMILIES.get(self.reader, (self.reader + ".",)))
        return (device == self.device or device.startswith((self.device + " ", self.device + "/"))) and \
            self.counter in ("", counter)

    def text(self) -> str:
        on = f" on {self.device}" if self.device else ""
        if self.counter and self.kind == "unreadable":  # one counter the window could not judge: its name first
            return f"not judged: {self.counter}{on} ({self.what}: {self.error})"
        return f"{self.reader}{on}: {self.what}: {self.error}"


@dataclass(frozen=True)
class KernelLine:
    """One kernel log record; `kind` says which hardware event it reports ("" for none)."""

    text: str
    seq: int | None = None     # /dev/kmsg sequence number
    usec: int | None = None    # kernel timestamp, microseconds since boot (the clock dmesg shows)
    kind: str = ""             # xid, sxid, gpu_lost, aer.*, mce, edac, hardware_error, amdgpu.{ue,de,ce,reset}
    device: str = ""           # the PCI address the line names, when it names one
    code: int | None = None    # the Xid or SXid number
    count: int = 1             # the events it reports: an amdgpu RAS line's new errors ("2 new uncorrectable ...")

    @property
    def counter(self) -> str:
        """The counter this line adds `count` to: kernel.xid.79, kernel.aer.fatal, kernel.amdgpu.ue, ..."""
        return f"kernel.{self.kind}" + (f".{self.code}" if self.code is not None else "")


@dataclass(frozen=True)
class LogCursor:
    """Where the kernel log stood when a snapshot was taken: the next snapshot reads what came after."""

    source: str               # kmsg or dmesg
    seq: int | None = None    # last sequence number read (kmsg)
    usec: int | None = None   # its timestamp (dmesg has no sequence numbers: the window is bounded by time)


@dataclass(frozen=True)
class Snapshot:
    """Every reader's facts for one node at one moment. `kernel` holds the hardware lines logged since
    the cursor of the snapshot this one was taken after (empty for a first snapshot)."""

    host: str
    taken: float                              # time.monotonic() on the node
    counters: tuple[Counter, ...] = ()
    gauges: tuple[Gauge, ...] = ()
    errors: tuple[ReadError, ...] = ()
    notes: tuple[str, ...] = ()               # a reader with nothing to read here says so: "no thermal zones"
    cursor: LogCursor | None = None
    kernel: tuple[KernelLine, ...] = ()

    def counter(self, name: str, device: str) -> Counter | None:
        return next((c for c in self.counters if c.key == (name, device)), None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Snapshot:
        cursor = d.get("cursor")
        return Snapshot(
            d["host"], float(d["taken"]),
            tuple(Counter(c["name"], c["device"], int(c["value"]), tuple((p, int(v)) for p, v in c["parts"]))
                  for c in d.get("counters", ())),
            tuple(Gauge(**g) for g in d.get("gauges", ())),
            tuple(ReadError(**e) for e in d.get("errors", ())),
            tuple(d.get("notes", ())),
            LogCursor(**cursor) if cursor else None,
            tuple(KernelLine(**k) for k in d.get("kernel", ())))


@dataclass(frozen=True)
class Reading:
    """What one reader returns; `take` merges them into a Snapshot."""

    counters: tuple[Counter, ...] = ()
    gauges: tuple[Gauge, ...] = ()
    errors: tuple[ReadError, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
