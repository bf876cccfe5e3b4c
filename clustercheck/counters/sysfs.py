"""Counters and gauges Linux exposes in sysfs and procfs, each reader with a root parameter so tests can
point it at a copied tree: PCIe AER (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats), InfiniBand
port counters (/sys/class/infiniband/*/ports/*/counters), AMD GPUs' RAS error counts (amdgpu), thermal zones, CPU frequency and CPU thermal
throttle counts. A counter file that exists and cannot be read is a ReadError, never zero (a gauge's, which
no verdict reads, a note naming the file, never a value); a node without the
thing (no AER-capable device, no IB, no thermal zone) gets a note saying so. Nothing here asks exists(),
is_dir() or glob(): the first two raise PermissionError out of the reader (Python 3.11 ignores only
ENOENT-like errors), glob() answers [] for a directory it may not list, which would read as "not on this
hardware". Files are read, directories listed, and only FileNotFoundError (or NotADirectoryError) is absence.
(The CPU frequency, a gauge no verdict judges, is still globbed, /proc/cpuinfo its fallback.)"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Callable, TypeVar

from clustercheck.counters.facts import Counter, Gauge, Reading, ReadError
from clustercheck.counters.pci import BUS_ID_RE

PCI = Path("/sys/bus/pci/devices")
IB = Path("/sys/class/infiniband")
THERMAL = Path("/sys/class/thermal")
CPUS = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")
DRM = Path("/sys/class/drm")
NO_GPU = "no GPU counters: "  # a GPU reader's note for a node without its vendor's GPUs (snapshot.take)

_AER = {"aer_dev_correctable": ("correctable", "TOTAL_ERR_COR"), "aer_dev_nonfatal": ("nonfatal", "TOTAL_ERR_NONFATAL"),
        "aer_dev_fatal": ("fatal", "TOTAL_ERR_FATAL")}
_ROOTPORT = {"aer_rootport_total_err_cor": "correctable", "aer_rootport_total_err_nonfatal": "nonfatal",
             "aer_rootport_total_err_fatal": "fatal"}

# The error counters of an IB port (facebookresearch/gcm gcm/health_checks/checks/check_ib_counters.py
# ERROR_COUNTERS) and their width in bits in the PortCounters attribute (InfiniBand Architecture
# Specification vol. 1, PortCounters): a counter at its top value stops counting.
IB_ERROR_BITS = {"symbol_error": 16, "link_error_recovery": 8, "link_downed": 8, "port_rcv_errors": 16,
                 "port_rcv_remote_physical_errors": 16, "port_rcv_switch_relay_errors": 16,
                 "port_xmit_discards": 16, "port_xmit_constraint_errors": 8, "port_rcv_constraint_errors": 8,
                 "local_link_integrity_errors": 4, "excessive_buffer_overrun_errors": 4, "VL15_dropped": 16}


def _error(reader: str, device: str, path: Path, exc: Exception, counter: str = "") -> ReadError:
    kind = "vanished" if isinstance(exc, FileNotFoundError) else "unreadable"  # listed, then gone
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return ReadError(reader, device, str(path), text, kind, counter)


_ABSENT = (FileNotFoundError, NotADirectoryError)
_N = TypeVar("_N", int, float)


def _names(directory: Path) -> list[str]:
    """The entries of `directory`, sorted; OSError as the kernel answers (FileNotFoundError: absent)."""
    with os.scandir(directory) as entries:
        return sorted(e.name for e in entries)


def _find(reader: str, root: Path, levels: tuple[str, ...], device: Callable[[Path], str]
          ) -> tuple[list[Path], list[ReadError]]:
    """root.glob("/".join(levels)), but a directory on the way that is there and cannot be listed is an
    unreadable ReadError naming it (`device(directory)`: what it was about), not a match fewer."""
    paths, errors = [root], []
    for level in levels:
        found = []
        for path in paths:
            try:
                found += [path / n for n in _names(path) if fnmatch.fnmatchcase(n, level)]
            except _ABSENT:
                continue
            except OSError as exc:
                errors.append(_error(reader, device(path), path, exc))
        paths = found
    return paths, errors


def _text(path: Path) -> str | None:
    """The file's text; None when it is not there; OSError when it is there and cannot be read."""
    try:
        return path.read_text()
    except _ABSENT:
        return None


def aer_counts(text: str) -> tuple[int | None, tuple[tuple[str, int], ...]]:
    """(the TOTAL_ERR_* line's count, the named counts) of an aer_dev_* file: one `name count` per line;
    names have spaces since Linux 5.x ("Receiver Error 2"), none before ("RxErr 2")."""
    total, parts = None, []
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if not name or not value.isdigit():
            raise ValueError(f"unexpected line {line.strip()!r} (expected '<error name> <count>')")
        if name.startswith("TOTAL_ERR_"):
            total = int(value)
        else:
            parts.append((name.strip(), int(value)))
    return total, tuple(parts)


def aer(root: Path = PCI) -> Reading:
    """pcie.aer.{correctable,nonfatal,fatal} per PCI function with AER statistics, with the kernel's
    per-error breakdown; root ports add pcie.aer.rootport.* (the messages reported to them)."""
    counters: list[Counter] = []
    errors: list[ReadError] = []
    try:
        devices = [root / n for n in _names(root)]
    except _ABSENT:  # no PCI bus in sysfs (a container without /sys/bus/pci): what the node lacks, as ib()'s
        return Reading(notes=(f"no PCIe AER statistics ({root} absent)",))  # root; `vanished` failed the node
    except OSError as exc:
        return Reading(errors=(_error("pcie.aer", "", root, exc),))
    for dev in devices:
        for file, (name, total_key) in _AER.items():
            path = dev / file
            try:
                if (text := _text(path)) is None:
                    continue
                total, parts = aer_counts(text)
                if total is None:
                    raise ValueError(f"no {total_key} line")
            except (OSError, ValueError) as exc:
                errors.append(_error("pcie.aer", dev.name, path, exc, f"pcie.aer.{name}"))
                continue
            counters.append(Counter(f"pcie.aer.{name}", dev.name, total, parts))
        for file, name in _ROOTPORT.items():
            path = dev / file
            try:
                if (text := _text(path)) is None:
                    continue
                counters.append(Counter(f"pcie.aer.rootport.{name}", dev.name, int(text)))
            except (OSError, ValueError) as exc:
                errors.append(_error("pcie.aer", dev.name, path, exc, f"pcie.aer.rootport.{name}"))
    notes = () if counters or errors else (f"no PCIe AER statistics under {root} (no AER-capable device, "
                                           "or a kernel without aer_stats)",)
    return Reading(tuple(counters), (), tuple(errors), notes)


def ib(root: Path = IB) -> Reading:
    """ib.<counter> per port (device `mlx5_0/1`) for the error counters; a saturated one is an error
    (its increases cannot be seen; `perfquery -R` resets it), "N/A (no PMA)" is a note."""
    try:
        _names(root)
    except _ABSENT:
        return Reading(notes=(f"no InfiniBand devices ({root} absent)",))
    except OSError as exc:
        return Reading(errors=(_error("ib", "", root, exc),))

    def device(path: Path) -> str:  # <dev> for <dev>/ports, <dev>/<port> for a port's directory
        parts = path.relative_to(root).parts
        return "/".join(parts[0:1] + parts[2:3])

    dirs_found, errors = _find("ib", root, ("*", "ports", "*", "counters"), device)
    counters: list[Counter] = []
    notes: list[str] = []
    for dirs in dirs_found:
        port = f"{dirs.parent.parent.parent.name}/{dirs.parent.name}"
        for name, bits in IB_ERROR_BITS.items():
            path = dirs / name
            try:
                if (read := _text(path)) is None:
                    continue
            except OSError as exc:
                errors.append(_error("ib", port, path, exc, f"ib.{name}"))
                continue
            text = read.strip()
            if text.startswith("N/A"):
                notes.append(f"ib {port} {name}: {text}")
                continue
            if not text.isdigit():
                errors.append(ReadError("ib", port, str(path), f"not a count: {text[:40]!r}", counter=f"ib.{name}"))
                continue
            value = int(text)
            counters.append(Counter(f"ib.{name}", port, value))
            if value >= (1 << bits) - 1:
                errors.append(ReadError("ib", port, str(path), f"saturated at {value} ({bits}-bit counter): its "
                                        "increases cannot be seen; reset the port counters (perfquery -R)",
                                        "saturated", f"ib.{name}"))
    if not counters and not errors and not notes:
        notes.append(f"no InfiniBand port counters under {root}")
    return Reading(tuple(counters), (), tuple(errors), tuple(notes))


def thermal(root: Path = THERMAL) -> Reading:
    """thermal.temp in C per zone (device `thermal_zone0 (x86_pkg_temp)`); a zone not read is a note (_unread)."""
    found, errors = _find("thermal", root, ("thermal_zone*",), lambda _: "")
    zones = sorted(found, key=lambda p: int(re.sub(r"\D", "", p.name) or 0))
    if not zones and not errors:
        return Reading(notes=(f"no thermal zones under {root}",))
    gauges: list[Gauge] = []
    for zone in zones:
        try:
            kind = (zone / "type").read_text().strip()
        except OSError:
            kind = "?"
        device = f"{zone.name} ({kind})"
        try:
            gauges.append(Gauge("thermal.temp", device, int((zone / "temp").read_text()) / 1000.0, "C"))
        except (OSError, ValueError) as exc:
            errors.append(_error("thermal", device, zone / "temp", exc))
    return Reading((), tuple(gauges), (), _unread("thermal.temp", errors))


def _unread(gauge: str, errors: list[ReadError]) -> tuple[str, ...]:
    """A gauge no verdict reads (the snapshot's temperatures and clocks: nothing judges them; the watch
    samples its own) that could not be read, as notes naming the file: an error made every item of the node
    `not judged` (a harness error), a file gone after it was listed a failed `vanished` verdict, for a
    reading nobody judges."""
    return tuple(f"{gauge}{f' of {e.device}' if e.device else ''} not read, a gauge no verdict reads: {e.what}: "
                 f"{e.error}" for e in errors)


def cpu_mhz(root: Path = CPUS, cpuinfo: Path = CPUINFO, cpus: frozenset[int] | None = None) -> Reading:
    """cpu.mhz per CPU (`cpus`: these only): cpufreq's scaling_cur_freq, else /proc/cpuinfo's "cpu MHz"
    (x86 VMs often have no cpufreq). A CPU's clock not read is a note (_unread)."""
    files = sorted(root.glob("cpu[0-9]*/cpufreq/scaling_cur_freq"), key=lambda p: int(p.parent.parent.name[3:]))
    gauges: list[Gauge] = []
    errors: list[ReadError] = []
    for path in files:
        cpu = int(path.parent.parent.name[3:])
        if cpus is not None and cpu not in cpus:
            continue
        try:
            text = path.read_text()
        except OSError as exc:
            errors.append(_error("cpu.freq", f"cpu{cpu}", path, exc, "cpu.mhz"))
            continue
        if (khz := _number(text, int)) is None:  # empty, "<unknown>": this CPU's clock is not known
            errors.append(ReadError("cpu.freq", f"cpu{cpu}", str(path), f"not a frequency in kHz: {text.strip()[:40]!r}",
                                    counter="cpu.mhz"))
            continue
        gauges.append(Gauge("cpu.mhz", f"cpu{cpu}", khz / 1000.0, "MHz"))
    if files:
        return Reading((), tuple(gauges), (), _unread("cpu.mhz", errors))
    try:
        if (info := _text(cpuinfo)) is None:
            return Reading(notes=(f"no CPU frequency: no cpufreq under {root} and no {cpuinfo}",))
    except OSError as exc:
        return Reading(notes=_unread("cpu.mhz", [_error("cpu.freq", "", cpuinfo, exc, "cpu.mhz")]))
    at: int | None = -1  # None after a "processor" line that names no CPU: the lines after it are of no known CPU
    for line in info.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "processor":
            at = _number(value, int)
            if at is None:
                errors.append(ReadError("cpu.freq", "", str(cpuinfo), f"a 'processor' line names no CPU: "
                                        f"{value.strip()[:40]!r}", counter="cpu.mhz"))
        elif key.strip() == "cpu MHz" and at is not None and (cpus is None or at in cpus):
            if (mhz := _number(value, float)) is not None:
                gauges.append(Gauge("cpu.mhz", f"cpu{at}", mhz, "MHz"))
            else:
                errors.append(ReadError("cpu.freq", f"cpu{at}", str(cpuinfo), f"'cpu MHz' is not a number: "
                                        f"{value.strip()[:40]!r}", counter="cpu.mhz"))
    notes = () if gauges or errors else (f"no CPU frequency: no cpufreq under {root} and no 'cpu MHz' in {cpuinfo}",)
    return Reading((), tuple(gauges), (), notes + _unread("cpu.mhz", errors))


def _number(text: str, kind: Callable[[str], _N]) -> _N | None:
    """`text` as a finite number of `kind`; None for anything else (empty, "<unknown>", "nan")."""
    try:
        value = kind(text.strip())
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def cpu_throttle(root: Path = CPUS) -> Reading:
    """cpu.throttle.{core,package}: x86 thermal throttle events per CPU (arch/x86 therm_throt)."""
    counters: list[Counter] = []
    found, errors = _find("cpu.throttle", root, ("cpu[0-9]*", "thermal_throttle", "*_throttle_count"),
                          lambda p: p.relative_to(root).parts[0] if p != root else "")
    for path in found:
        cpu = path.parent.parent.name
        try:
            counters.append(Counter(f"cpu.throttle.{path.name.split('_')[0]}", cpu, int(path.read_text())))
        except (OSError, ValueError) as exc:
            errors.append(_error("cpu.throttle", cpu, path, exc))
    notes = () if counters or errors else (f"no CPU thermal throttle counters under {root}",)
    return Reading(tuple(counters), (), tuple(errors), notes)


def ras_counts(text: str) -> dict[str, int]:
    """An amdgpu <block>_err_count file: "ue: N" and "ce: N" lines, and "de: N" (deferred) for umc on newer
    kernels (torvalds/linux drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c amdgpu_ras_sysfs_read:
    sysfs_emit(buf, "%s: %lu\\n%s: %lu\\n", "ue", info.ue_count, "ce", info.ce_count)). Anything else
    ("Query currently inaccessible", while the driver recovers) is a ValueError."""
    counts = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in ("ue", "ce", "de") or not value.strip().isdigit():
            raise ValueError(f"unexpected line {line.strip()!r} (expected 'ue: N', 'ce: N' or 'de: N')")
        counts[key.strip()] = int(value)
    if not {"ue", "ce"} <= counts.keys():
        raise ValueError("no 'ue: N' and 'ce: N' lines")
    return counts


def amdgpu(root: Path = DRM) -> Reading:
    """amdgpu.{ue,ce,de}.<block> per AMD GPU (device: its PCI bus id, as AER's) from the amdgpu driver's RAS
    error counts, /sys/class/drm/card<N>/device/ras/<block>_err_count (torvalds/linux Documentation/gpu/
    amdgpu/ras.rst, "RAS Error Count sysfs Interface"; amdgpu_ras.c). The kind comes before the block so one
    allowance covers every block (amdgpu.ue: 0, amdgpu.ce as NVIDIA's corrected ECC). A card bound to amdgpu
    without ras/ (RAS not enabled, or a consumer GPU) is a note naming it; a ras/ that cannot be listed, or a
    count that cannot be read, is an unreadable error naming the file."""
    cards, errors = _find("amdgpu", root, ("card*",), lambda _: "")
    counters: list[Counter] = []
    notes: list[str] = []
    amd = 0
    for card in (c for c in cards if re.fullmatch(r"card\d+", c.name)):  # not card0-DP-1 (connectors)
        dev = card / "device"
        try:
            if os.path.basename(os.readlink(dev / "driver")) != "amdgpu":
                continue
        except _ABSENT:  # no driver bound
            continue
        except OSError as exc:
            errors.append(_error("amdgpu", card.name, dev / "driver", exc))
            continue
        amd += 1
        bus = Path(os.path.realpath(dev)).name  # device -> ../../../0000:c1:00.0
        gpu = bus.lower() if BUS_ID_RE.fullmatch(bus) else card.name
        ras = dev / "ras"
        try:
            files = [n for n in _names(ras) if n.endswith("_err_count")]
        except _ABSENT:
            files = []
        except OSError as exc:
            errors.append(_error("amdgpu", gpu, ras, exc))
            continue
        if not files:
            notes.append(f"{card.name} ({gpu}): no amdgpu RAS error counts in {ras} (RAS not enabled)")
        for file in files:
            block, path = file[:-len("_err_count")], ras / file
            try:
                counts = ras_counts(path.read_text())
            except (OSError, ValueError) as exc:
                errors += [_error("amdgpu", gpu, path, exc, f"amdgpu.{k}.{block}")
                           for k in ("ue", "ce", "de")[:3 if block == "umc" else 2]]
                continue
            counters += [Counter(f"amdgpu.{k}.{block}", gpu, v) for k, v in counts.items()]
    if not amd and not errors:
        notes.append(f"{NO_GPU}no GPU bound to amdgpu under {root}")
    return Reading(tuple(counters), (), tuple(errors), tuple(notes))
