"""Kernel log lines within a check's window, with the hardware events among them classified (NVIDIA Xid
and SXid, a GPU fallen off the bus, amdgpu RAS errors and resets, PCIe AER, machine checks, EDAC,
firmware-reported hardware errors).

The window is bounded by position, not by scanning history: a snapshot keeps a cursor (the last
/dev/kmsg sequence number read, or with `dmesg` the last timestamp) and the next snapshot reads only
what came after it, so an event is blamed on the one check during which it was logged (an unbounded
scan blamed one event on every later test: ROCm/cvs PR #169). /dev/kmsg is read non-blocking (root, or
kernel.dmesg_restrict=0); where it cannot be opened, or opens and gives no record (not the kernel's),
`dmesg -r` (util-linux); where neither works the window is an error, never empty. Lines overwritten in the ring buffer before they were read are an
error too (any sequence number after the cursor missing, before or between the records read: kmsg
numbers records contiguously, and a read that meets an overwritten record fails with EPIPE and goes on
with the oldest one left; through dmesg, the oldest line is later than the cursor). A cursor taken through the other source (kmsg, then dmesg, or the reverse) bounds the
window by its timestamp, the clock both share; a window that cannot be bounded at all is an error."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from clustercheck.counters.facts import KernelLine, LogCursor, ReadError
from clustercheck.counters.pci import BUS_ID

KMSG = Path("/dev/kmsg")
_BUS = f"({BUS_ID})"
# NVRM prints `Xid (PCI:0000:01:00): 13`, on a MIG GPU with the instance after the bus id
# (`Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:02): 13`, NVIDIA/open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/
# kernel_rc.c: "PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u"), and NVIDIA's Xid documentation shows
# `Xid (0000:03:00): 14` without `PCI:`: a form missed is an Xid that passes a check
_MIG = r"(?: GPU-I:\d+)?(?: GPU-CI:\d+)?"
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?" + _BUS + _MIG + r"\): (\d+)")
_SXID = re.compile(r"SXid \((?:PCI:)?" + _BUS + r"\): (\d+)")
# amdgpu's RAS reports, printed with dev_info ("amdgpu 0000:0b:00.0: amdgpu: ..."). torvalds/linux
# drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c: "%ld uncorrectable hardware errors detected in %s block" and
# "%ld correctable hardware errors detected in %s block, no user action is needed." (older kernels, optionally
# after "socket: %d, die: %d ": the number is the block's running total since the driver loaded, printed only
# when new errors came); amdgpu_ras_error_print_error_data: "socket: %d, die: %d, %lld new {uncorrectable,
# correctable,deferred} hardware errors detected in %s block" (RAS_EVENT_LOG may put an event id "{%llu}" before
# it), each followed by "... detected in total in %s block", which repeats the running total and is skipped so
# nothing counts twice; the ras_core ACA path: "{%llu} socket: %d, die: %d, %u new %s detected in %s block" with
# "deferred hardware errors" or "poison consumption"; amdgpu_umc.c amdgpu_umc_do_page_retirement: "%ld
# uncorrectable hardware errors and %ld deferred hardware errors detected in UMC block"; amdgpu_device.c
# amdgpu_device_gpu_recover: "GPU reset begin!" (newer kernels add ". Source: %d").
_AMD_AT = re.compile(r"\bamdgpu " + _BUS + r":")
_AMD_UMC = re.compile(r"\b(\d+) uncorrectable hardware errors and (\d+) deferred hardware errors detected in \w+ block")
_AMD_RAS = re.compile(r"\b(\d+) (new )?(uncorrectable|correctable|deferred) hardware errors detected in "
                      r"(total in )?\w+ block")
_AMD_POISON = re.compile(r"\b(\d+) new poison consumption detected in \w+ block")
_AMD_RESET = re.compile(r"\bGPU reset begin!")
_AMD_KIND = {"uncorrectable": "amdgpu.ue", "deferred": "amdgpu.de", "correctable": "amdgpu.ce"}
_LOST = re.compile(r"fallen off the bus")
_LOST_AT = re.compile(r"(?:NVIDIA GPU|GPU at PCI:) ?" + _BUS)
_AER = re.compile(r"AER: (?:Multiple )?(Correct\w+|Uncorrect\w+ \(Non-Fatal\)|Uncorrect\w+ \(Fatal\)) error"
                  r"(?:s)?(?: message)? received:? (?:from )?" + _BUS)
_MCE = re.compile(r"mce: \[Hardware Error\]|Machine check events logged|Machine Check Exception")
_EDAC = re.compile(r"EDAC \S+: \d+ (CE|UE)\b")
_HW = re.compile(r"\[Hardware Error\]")
_KMSG_RECORD = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_DMESG_RAW = re.compile(r"^(?:<(\d+)>)?\[\s*(\d+)\.(\d{1,6})\] ?(.*)$")
_ESCAPE = re.compile(r"\\x([0-9a-f]{2})")


def classify(text: str) -> tuple[str, str, int | None]:
    """(kind, PCI address, code) of a kernel message; kind "" when it reports no hardware event."""
    return _classify(text)[:3]


def _amdgpu(text: str) -> tuple[str, int]:
    """(kind, errors it reports) of an amdgpu RAS or reset line; ("", 0) for none, a running total or a zero."""
    if m := _AMD_UMC.search(text):
        ue, de = int(m.group(1)), int(m.group(2))
        return ("amdgpu.ue", ue) if ue else ("amdgpu.de", de) if de else ("", 0)
    if m := _AMD_RAS.search(text):
        if m.group(4) or not int(m.group(1)):  # "in total": the running total of errors reported before it
            return "", 0
        # without "new" the number is the running total; the driver prints it only when errors came: at least one
        return _AMD_KIND[m.group(3)], int(m.group(1)) if m.group(2) else 1
    if (m := _AMD_POISON.search(text)) and int(m.group(1)):
        return "amdgpu.de", int(m.group(1))
    if _AMD_RESET.search(text):
        return "amdgpu.reset", 1
    return "", 0


def _classify(text: str) -> tuple[str, str, int | None, int]:
    """classify()'s answer and the number of events the line reports (an amdgpu RAS line: its new errors)."""
    kind, count = _amdgpu(text) if "amdgpu" in text or "GPU reset begin!" in text else ("", 0)
    if kind:
        at = _AMD_AT.search(text)
        return kind, at.group(1).lower() if at else "", None, count
    return (*_classify_other(text), 1)


def _classify_other(text: str) -> tuple[str, str, int | None]:
    if m := _XID.search(text):
        return "xid", m.group(1).lower(), int(m.group(2))
    if m := _SXID.search(text):
        return "sxid", m.group(1).lower(), int(m.group(2))
    if _LOST.search(text):
        at = _LOST_AT.search(text)
        return "gpu_lost", at.group(1).lower() if at else "", None
    if m := _AER.search(text):
        severity = m.group(1).lower()
        kind = "aer.corrected" if severity.startswith("correct") else \
            "aer.fatal" if "(fatal)" in severity else "aer.nonfatal"
        return kind, m.group(2).lower(), None
    if _MCE.search(text):
        return "mce", "", None
    if m := _EDAC.search(text):
        return f"edac.{m.group(1).lower()}", "", None
    if _HW.search(text):
        return "hardware_error", "", None
    return "", "", None


def _line(text: str, seq: int | None = None, usec: int | None = None) -> KernelLine:
    kind, device, code, count = _classify(text)
    return KernelLine(text, seq, usec, kind, device, code, count)


def parse_kmsg(text: str) -> list[KernelLine]:
    """/dev/kmsg records (`prio,seq,usec,flags;message`, Documentation/ABI/testing/dev-kmsg); the
    indented dictionary lines after a record are skipped, escaped newlines (\\x0a) restored."""
    out = []
    for raw in text.splitlines():
        if m := _KMSG_RECORD.match(raw):
            message = _ESCAPE.sub(lambda e: chr(int(e.group(1), 16)), m.group(4))
            out.append(_line(message, int(m.group(2)), int(m.group(3))))
    return out


def parse_dmesg(text: str) -> list[KernelLine]:
    """`dmesg` or `dmesg -r` output: `[  84.300451] message`, continuation lines (indented, no stamp)
    joined to their record. `dmesg -r` prints each line of a multi-line record with the record's own
    `<4>[ 2555.182205]` prefix (NVRM's "The NVIDIA GPU 0000:b3:00.0 / ... / fallen off the bus"): a line
    with the same priority and timestamp as the one before is joined to it, unless it is an Xid, SXid,
    AER or amdgpu line of its own (those name their device; two logged in one microsecond stay two). Lines
    stamped otherwise (--ctime, journal) keep no timestamp."""
    # Each record's lines are collected and the record classified once, when the input ends: rebuilding and
    # classifying the growing record at every joined line took quadratic time (16,000 lines of one stamp: 56 s)
    records: list[tuple[list[str], int | None]] = []  # (its lines, its timestamp)
    last: tuple[str | None, int] | None = None  # the priority and timestamp of the record before
    for raw in text.splitlines():
        m = _DMESG_RAW.match(raw)
        if m:
            usec = int(m.group(2)) * 1_000_000 + int(m.group(3).ljust(6, "0"))
            own = _XID.search(m.group(4)) or _SXID.search(m.group(4)) or _AER.search(m.group(4)) or \
                _AMD_AT.match(m.group(4))
            if records and last == (m.group(1), usec) and not own:
                records[-1][0].append(m.group(4))
            else:
                records.append(([m.group(4)], usec))
            last = (m.group(1), usec)
        elif raw[:1].isspace() and records and raw.strip():
            records[-1][0].append(raw.strip())
        elif raw.strip():
            records.append(([raw], None))
            last = None
    return [_line("\n".join(parts), None, usec) for parts, usec in records]


def read_kmsg(path: Path = KMSG) -> list[KernelLine]:
    """Every record still in the ring buffer, read without blocking; OSError when it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # /dev/kmsg: nothing more to read now
                break
            except BrokenPipeError:  # EPIPE: the record at our position was overwritten; go on with the next
                continue
            if not chunk:  # a regular file (a captured log) ends
                break
            chunks.append(chunk)  # /dev/kmsg gives one whole record per read, each ending in a newline
    finally:
        os.close(fd)
    return parse_kmsg(b"".join(chunks).decode("utf-8", "replace"))


def read_dmesg(command: tuple[str, ...] = ("dmesg", "-r")) -> list[KernelLine]:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise OSError(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return parse_dmesg(done.stdout)


def _gaps(cursor: int, seqs: list[int]) -> list[tuple[int, int]]:
    """The runs of sequence numbers after `cursor` missing from `seqs`. /dev/kmsg numbers its records
    contiguously, so a gap is records overwritten before they were read: read() returned EPIPE at them
    and the reader went on with the oldest record left (a gap after the first new record as well as
    before it)."""
    gaps: list[tuple[int, int]] = []
    expected = cursor + 1
    for seq in sorted(set(s for s in seqs if s > cursor)):
        if seq > expected:
            gaps.append((expected, seq - 1))
        expected = seq + 1
    return gaps


def _read(kmsg: Path, dmesg: tuple[str, ...]) -> tuple[list[KernelLine], str] | ReadError:
    """The whole ring buffer and where it was read (kmsg, else dmesg), or why it could not be. /dev/kmsg
    that opens and gives no record is not the kernel's log: the kernel's always holds its latest records,
    and `dmesg --clear` does not empty it (it moves syslog's clear mark; a /dev/kmsg reader starts at the
    first record kept). A container's /dev/kmsg bound to /dev/null reads so, and read as a quiet log it
    passed every window. `dmesg` then is asked; by default it reads the same /dev/kmsg, so nothing printed
    after an empty /dev/kmsg is no log either. Only `dmesg` alone (/dev/kmsg unopenable: it reads through
    syslog, since the last clear) may print nothing for a buffer a job prolog cleared: window() reads that
    as a quiet buffer, and lines gone from a buffer that had some as `lost`."""
    try:
        if lines := read_kmsg(kmsg):
            return lines, "kmsg"
        first, opened = "it opened and gave no record, which the kernel's /dev/kmsg never does (dmesg --clear " \
                        "does not empty it): the kernel log read empty, cleared or hidden", True
    except OSError as exc:
        first, opened = f"cannot read it ({exc})", False
    try:
        lines = read_dmesg(dmesg)
    except (OSError, subprocess.SubprocessError) as second:
        return ReadError("kernel.log", "", str(kmsg), f"{first} nor run {' '.join(dmesg)} ({second})")
    if opened and not lines:
        return ReadError("kernel.log", "", str(kmsg), f"{first}; {' '.join(dmesg)} printed nothing either")
    return lines, "dmesg"


def window(cursor: LogCursor | None, kmsg: Path = KMSG, dmesg: tuple[str, ...] = ("dmesg", "-r")
           ) -> tuple[tuple[KernelLine, ...], LogCursor | None, tuple[ReadError, ...]]:
    """The lines logged after `cursor` (none for a first snapshot: history before the window is not the
    window's), the cursor to give the next snapshot, and errors (log unreadable, lines lost)."""
    got = _read(kmsg, dmesg)
    if isinstance(got, ReadError):  # at any snapshot, the first too: the window it opens would start unread
        return (), cursor, (got,)
    lines, source = got
    seqs = [l.seq for l in lines if l.seq is not None]
    stamps = [l.usec for l in lines if l.usec is not None]
    if source == "kmsg" and cursor is not None and cursor.source == "kmsg" and cursor.seq is not None:
        new = LogCursor("kmsg", max(seqs, default=cursor.seq), max(stamps, default=cursor.usec))
        after = tuple(l for l in lines if l.seq is not None and l.seq > cursor.seq)
        errors: tuple[ReadError, ...] = ()
        if gaps := _gaps(cursor.seq, seqs):
            shown = ", ".join(f"{a}..{b}" if a != b else str(a) for a, b in gaps[:5])
            errors = (ReadError("kernel.log", "", str(kmsg), f"records {shown}{' and more' if len(gaps) > 5 else ''}"
                                f" were overwritten in the ring buffer before they were read", "lost"),)
        return after, new, errors
    new = LogCursor(source, max(seqs) if seqs else None, max(stamps, default=cursor.usec if cursor else None))
    if cursor is None:
        return (), new, ()
    # By time: dmesg has no sequence numbers, and a cursor taken through the other source (kmsg one snapshot,
    # dmesg the next, or the reverse) has no sequence number this read can use; both stamp records with the
    # same clock, microseconds since boot.
    where = str(kmsg) if source == "kmsg" else " ".join(dmesg)
    if not lines and cursor.usec is None:  # empty then and now (a job prolog's dmesg --clear): nothing logged
        return (), new, ()
    if not lines:  # dmesg --clear in the window empties what dmesg prints: the window's lines, if any, are gone
        return (), new, (ReadError("kernel.log", "", where, "no records at all: the ring buffer was cleared, so "
                                   "lines logged in this window may be gone", "lost"),)
    if not stamps:  # printk.time=0
        return (), new, (ReadError("kernel.log", "", where, "not judged: its records carry no timestamps, so the "
                                   "lines logged in this window cannot be told from earlier ones"),)
    if cursor.usec is None:  # the last read found the buffer empty (records are stamped): all of these are new
        return tuple(l for l in lines if l.usec is not None), new, ()
    after = tuple(l for l in lines if l.usec is not None and l.usec > cursor.usec)
    if min(stamps) > cursor.usec:  # the record at the cursor is gone, and maybe later ones with it
        return after, new, (ReadError("kernel.log", "", where, f"the ring buffer now starts at "
                                      f"{min(stamps) / 1e6:.6f} s, after the window's start at {cursor.usec / 1e6:.6f} "
                                      "s: lines logged between them may have been overwritten before they were read",
                                      "lost"),)
    return after, new, ()
