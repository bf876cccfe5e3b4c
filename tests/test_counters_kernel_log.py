"""Kernel log lines per check window: real captured lines with NVIDIA Xids (and a GPU fallen off the bus
without one) are classified by kind, GPU and code; the window is bounded by the /dev/kmsg sequence number
(or dmesg's timestamp), so an event fails the one window that contained it and no later one (ROCm/cvs PR
#169); an unreadable log or overwritten lines are errors, never an empty window. /dev/kmsg is read live."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from clustercheck.counters import delta, judge, kernel_log, take
from clustercheck.counters.facts import LogCursor
from clustercheck.counters.kernel_log import KMSG, classify, parse_dmesg, parse_kmsg, window
from clustercheck.counters.snapshot import Sources
from test_counters import body

LOGS = Path(__file__).resolve().parent / "fixtures" / "kernel-log"


def lines(name: str) -> list[str]:
    return body(LOGS / name)


def test_xid_lines_from_real_logs_name_code_and_gpu() -> None:
    got = [classify(l) for l in lines("gpud-pr1174-kmsg-xid-149-145-94.txt")]
    assert got == [("xid", "0019:01:00", 149), ("xid", "0000:00:00", 149), ("xid", "0018:01:00", 145),
                   ("xid", "0000:9b:00", 94)]
    journal = [classify(l) for l in lines("open-gpu-kernel-modules-1150-xid-45-after-149.txt")]
    assert {c[0] for c in journal} == {"xid"} and {c[2] for c in journal} == {45}
    assert sorted({c[1] for c in journal}) == ["0000:97:00", "0000:ba:00", "0000:dc:00", "0000:ed:00"]


def test_a_dmesg_ctime_capture_keeps_its_xids_and_nothing_else() -> None:
    parsed = parse_dmesg("\n".join(lines("gpud-dmesg-ctime-xid-119-xe9680.txt")))
    events = [(l.kind, l.device, l.code) for l in parsed if l.kind]
    assert events == [("xid", "0000:9b:00", 119)] * 5  # the GSP dump, call trace and rate-limit lines are not events
    assert all(l.usec is None for l in parsed)  # wall-clock stamps: no monotonic position to bound a window by
    pr46 = [(l.kind, l.code) for l in parse_dmesg("\n".join(lines("gpud-pr46-dmesg-ctime-xid-13-109.txt")))]
    assert pr46 == [("", None), ("xid", 13), ("xid", 13), ("xid", 13), ("xid", 109)]  # peermem's ERROR is no event


def test_a_gpu_fallen_off_the_bus_without_an_xid_is_an_event_naming_the_gpu() -> None:
    parsed = parse_dmesg("\n".join(lines("nvsentinel-155-fallen-off-bus-no-xid.txt")))
    assert [(l.kind, l.device, l.usec) for l in parsed] == [
        ("gpu_lost", "0000:b3:00.0", 1843308145), ("", "", 1843439662), ("", "", 1843439669)]
    assert parsed[0].text.count("\n") == 2 and parsed[0].counter == "kernel.gpu_lost"


def test_raw_kmsg_records_from_a_real_node_keep_sequence_and_time() -> None:
    parsed = parse_kmsg("\n".join(lines("gpud-kmsg-nvswitch-node.txt")))
    assert [l.seq for l in parsed] == list(range(3964, 4011))
    assert parsed[-1].usec == 57631398464 and not any(l.kind for l in parsed)


def write_kmsg(path: Path, records: list[str]) -> None:
    path.write_text("\n".join(records) + "\n")


def test_an_xid_fails_the_window_that_logged_it_and_no_later_one(tmp_path: Path) -> None:
    records = lines("gpud-kmsg-nvswitch-node.txt")
    # Built by hand: a /dev/kmsg record (prio 4, the next sequence number) around the real Xid 94 message of
    # leptonai/gpud PR #1174; the records around it are the real capture's.
    xid = "4,4011,57631500000,-;" + lines("gpud-pr1174-kmsg-xid-149-145-94.txt")[3]
    kmsg = tmp_path / "kmsg"
    empty = tmp_path / "empty"
    empty.mkdir()
    src = Sources(pci=empty, ib=empty / "ib", thermal=empty, cpus=empty, cpuinfo=empty / "x", kmsg=kmsg, nvml=False)
    write_kmsg(kmsg, records[:27])
    s0 = take(sources=src, host="n")
    assert s0.cursor == LogCursor("kmsg", 3990, 251895583) and s0.kernel == ()  # history is not the window's
    write_kmsg(kmsg, records)
    s1 = take(s0, src, "n")
    write_kmsg(kmsg, records + [xid])
    s2 = take(s1, src, "n")
    write_kmsg(kmsg, records + [xid, "6,4012,57631600000,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready"])
    s3 = take(s2, src, "n")
    assert [len(s.kernel) for s in (s1, s2, s3)] == [20, 1, 1]
    verdict = {i: [f.text(0).split(" in ")[0] for f in judge(delta(a, b)).failed]
               for i, (a, b) in enumerate(((s0, s1), (s1, s2), (s2, s3)), 1)}
    assert verdict == {1: [], 2: ["kernel.xid.94 on 0000:9b:00 rose by 1 (0 -> 1)"], 3: []}
    (finding,) = judge(delta(s1, s2)).failed
    assert finding.increase.lines == ("NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error",)


def test_lines_overwritten_before_they_were_read_are_an_error(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg"
    write_kmsg(kmsg, lines("gpud-kmsg-nvswitch-node.txt"))
    after, cursor, errors = window(LogCursor("kmsg", 3950, None), kmsg)
    assert len(after) == 47 and cursor is not None and cursor.seq == 4010
    assert [(e.kind, e.error) for e in errors] == [
        ("lost", "records 3951..3963 were overwritten in the ring buffer before they were read")]


def test_no_readable_kernel_log_is_an_error_not_an_empty_window(tmp_path: Path) -> None:
    after, cursor, errors = window(LogCursor("kmsg", 5, None), tmp_path / "no-kmsg", ("/nonexistent/dmesg",))
    assert after == () and cursor == LogCursor("kmsg", 5, None)
    assert errors[0].reader == "kernel.log" and "cannot read it" in errors[0].error and "dmesg" in errors[0].error


def test_dmesg_fallback_bounds_the_window_by_timestamp(tmp_path: Path) -> None:
    capture = LOGS / "nvsentinel-155-fallen-off-bus-no-xid.txt"
    dmesg = ("sed", "1,2d", str(capture))  # prints the capture as dmesg would
    after, cursor, errors = window(None, tmp_path / "no-kmsg", dmesg)
    assert after == () and cursor == LogCursor("dmesg", None, 1843439669) and not errors
    after, _, _ = window(LogCursor("dmesg", None, 1843308145), tmp_path / "no-kmsg", dmesg)
    assert [l.usec for l in after] == [1843439662, 1843439669]
    after, _, _ = window(LogCursor("dmesg", None, 1843000000), tmp_path / "no-kmsg", dmesg)
    assert after[0].kind == "gpu_lost"


def test_live_kmsg_window_holds_a_line_written_inside_it() -> None:
    """This machine's own /dev/kmsg (root here): a harmless marker line, written between two snapshots,
    is in that window and classified as no event."""
    first, cursor, errors = window(None)
    assert first == () and not errors and cursor is not None and cursor.source == "kmsg"
    marker = f"clustercheck test_counters_kernel_log window marker {uuid.uuid4()}"
    with open(KMSG, "w") as kmsg:
        kmsg.write(f"<6>{marker}\n")
    after, later, errors = window(cursor)
    assert not errors and later is not None and later.seq is not None and cursor.seq is not None
    assert [(l.text, l.kind) for l in after if marker in l.text] == [(marker, "")]
    assert all(l.seq is not None and l.seq > cursor.seq for l in after)
    again, _, _ = window(later)
    assert not any(marker in l.text for l in again)


def test_a_dmesg_window_whose_start_was_overwritten_is_lost_not_empty(tmp_path: Path) -> None:
    """Read through dmesg, a cursor at 1843.0 s when the ring buffer now starts at 1843.308145 s used to
    give the later lines and no error, where /dev/kmsg's sequence numbers say `lost`."""
    capture = LOGS / "nvsentinel-155-fallen-off-bus-no-xid.txt"
    dmesg = ("sed", "1,2d", str(capture))
    after, cursor, errors = window(LogCursor("dmesg", None, 1843000000), tmp_path / "no-kmsg", dmesg)
    assert after[0].kind == "gpu_lost" and cursor == LogCursor("dmesg", None, 1843439669)
    assert [(e.kind, e.error) for e in errors] == [
        ("lost", "the ring buffer now starts at 1843.308145 s, after the window's start at 1843.000000 s: lines "
                 "logged between them may have been overwritten before they were read")]
    assert window(LogCursor("dmesg", None, 1843308145), tmp_path / "no-kmsg", dmesg)[2] == ()  # its start is there
    unstamped = tmp_path / "printk-time-off"  # printk.time=0: `dmesg -r` prints no timestamps
    unstamped.write_text("<4>NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error\n")
    after, _, errors = window(LogCursor("dmesg", None, 1843000000), tmp_path / "no-kmsg", ("cat", str(unstamped)))
    assert after == () and "not judged: its records carry no timestamps" in errors[0].error
    (tmp_path / "cleared").write_text("")  # dmesg --clear during the window
    after, _, errors = window(LogCursor("dmesg", None, 1843000000), tmp_path / "no-kmsg",
                              ("cat", str(tmp_path / "cleared")))
    assert after == () and [e.kind for e in errors] == ["lost"]


def test_a_buffer_a_prolog_cleared_before_the_run_is_a_quiet_window_and_its_first_line_is_seen(tmp_path: Path) -> None:
    """`dmesg --clear` before the run (a job prolog): every later window was 'lost', and the first line logged
    after it 'not judged: the cursor has no timestamp'; an empty buffer then, empty now, is a quiet window."""
    empty = tmp_path / "empty"
    empty.write_text("")
    _, cursor, errors = window(None, tmp_path / "no-kmsg", ("cat", str(empty)))
    assert cursor == LogCursor("dmesg", None, None) and not errors
    assert window(cursor, tmp_path / "no-kmsg", ("cat", str(empty))) == ((), cursor, ())
    xid = tmp_path / "xid"
    xid.write_text("<4>[ 1843.308145] NVRM: Xid (PCI:0000:9b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    after, later, errors = window(cursor, tmp_path / "no-kmsg", ("cat", str(xid)))
    assert [l.usec for l in after] == [1843308145] and not errors and later == LogCursor("dmesg", None, 1843308145)


def as_dmesg(records: list[str]) -> str:
    """/dev/kmsg records as `dmesg -r` prints the same ring buffer: `<prio>[seconds.micros] message`."""
    out = []
    for r in records:
        prio, _, usec, rest = r.split(",", 3)
        out.append(f"<{prio}>[{int(usec) // 1_000_000:5d}.{int(usec) % 1_000_000:06d}] {rest.split(';', 1)[1]}")
    return "\n".join(out) + "\n"


def test_a_window_opened_through_one_source_and_read_through_the_other_keeps_its_lines(tmp_path: Path) -> None:
    """/dev/kmsg readable for one snapshot and not the other (or the reverse): the cursor has no sequence
    number the read can use, and the Xid logged in the window used to be dropped (an empty window); it is
    bounded by the timestamp both sources share."""
    records = lines("gpud-kmsg-nvswitch-node.txt")
    xid = "4,4011,57631500000,-;" + lines("gpud-pr1174-kmsg-xid-149-145-94.txt")[3]
    kmsg, dmesg, empty = tmp_path / "kmsg", tmp_path / "dmesg", tmp_path / "empty"
    empty.mkdir()

    def src(through: str) -> Sources:
        return Sources(pci=empty, ib=empty / "ib", thermal=empty, cpus=empty, cpuinfo=empty / "x", nvml=False,
                       kmsg=kmsg if through == "kmsg" else tmp_path / "no-kmsg", dmesg=("cat", str(dmesg)))

    for first, second in (("dmesg", "kmsg"), ("kmsg", "dmesg")):
        write_kmsg(kmsg, records[:27])
        dmesg.write_text(as_dmesg(records[:27]))
        s0 = take(sources=src(first), host="n")
        assert s0.cursor is not None and s0.cursor.source == first and s0.cursor.usec == 251895583
        write_kmsg(kmsg, records + [xid])
        dmesg.write_text(as_dmesg(records + [xid]))
        s1 = take(s0, src(second), "n")
        assert not s1.errors and len(s1.kernel) == 21 and s1.cursor is not None and s1.cursor.source == second
        assert [f.text(0).split(" in ")[0] for f in judge(delta(s0, s1)).failed] == [
            "kernel.xid.94 on 0000:9b:00 rose by 1 (0 -> 1)"], (first, second)


def test_records_lost_after_the_first_new_one_are_an_error(tmp_path: Path) -> None:
    """A gap between records read after the cursor (10, 11, then 20): records 12..19 were overwritten."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,10,1000,-;before\n6,11,1001,-;first in window\n6,20,2000,-;after the overwrite\n")
    after, cursor, errors = window(LogCursor("kmsg", 10, 1000), kmsg)
    assert [l.seq for l in after] == [11, 20] and cursor is not None and cursor.seq == 20
    assert [(e.kind, e.error) for e in errors] == [
        ("lost", "records 12..19 were overwritten in the ring buffer before they were read")]


def test_an_epipe_mid_read_is_a_lost_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/dev/kmsg answers EPIPE when the record at the reader's position was overwritten, then goes on
    with the oldest record left: the records skipped are lost, never a quiet window."""
    chunks: list[bytes | Exception] = [b"6,10,1000,-;before\n", b"6,11,1001,-;first in window\n",
                                       BrokenPipeError(), b"6,20,2000,-;after the overwrite\n"]

    def fake_read(fd: int, n: int) -> bytes:
        if not chunks:
            raise BlockingIOError
        chunk = chunks.pop(0)
        if isinstance(chunk, Exception):
            raise chunk
        return chunk

    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    monkeypatch.setattr(kernel_log.os, "read", fake_read)
    _, _, errors = window(LogCursor("kmsg", 10, 1000), kmsg)
    assert [e.kind for e in errors] == ["lost"] and "12..19" in errors[0].error


def test_a_dmesg_raw_record_of_several_lines_is_one_record_naming_the_lost_gpu() -> None:
    """`dmesg -r` prints each line of NVRM's multi-line record with the record's own prefix: the bus id is
    on the first line, "fallen off the bus" on the third. Read as three records, the GPU lost named no
    device; joined, it names 0000:b3:00.0. Two Xids in one microsecond stay two."""
    raw = ("<4>[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
           "<4>[ 1843.308145] NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
           "<4>[ 1843.308145] NVRM: fallen off the bus and is not responding to commands.\n"
           "<6>[ 1843.400000] nvidia-modeset: unrelated\n")
    got = parse_dmesg(raw)
    assert [(l.kind, l.device, l.usec) for l in got] == [("gpu_lost", "0000:b3:00.0", 1843308145), ("", "", 1843400000)]
    xids = parse_dmesg("<4>[ 10.000001] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n"
                       "<4>[ 10.000001] NVRM: Xid (PCI:0000:9c:00): 79, GPU has fallen off the bus.\n")
    assert [(l.kind, l.device, l.code) for l in xids] == [("xid", "0000:9b:00", 79), ("xid", "0000:9c:00", 79)]


@pytest.mark.parametrize("text, want", [
    # NVIDIA/open-gpu-kernel-modules kernel_rc.c: on a MIG GPU the instance follows the bus id
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=4242, name=python3, Contained ECC error",
     ("xid", "0000:01:00", 94)),
    ("NVRM: Xid (PCI:0000:01:00 GPU-I:01 GPU-CI:02): 13, pid=4242, name=python3, Graphics Exception",
     ("xid", "0000:01:00", 13)),
    # NVIDIA's Xid documentation: no `PCI:` before the bus id
    ("NVRM: Xid (0000:03:00): 14, Channel 00000001", ("xid", "0000:03:00", 14)),
    # the same tolerance for SXid (the nvswitch driver prints `SXid (PCI:...)`)
    ("nvidia-nvswitch3: SXid (0000:c6:00.0): 12028, Non-fatal, Link 32 egress", ("sxid", "0000:c6:00.0", 12028)),
    ("NVRM: Xid (PCI:0000:9b:00): 94, pid=1234, name=python3, Contained ECC error", ("xid", "0000:9b:00", 94)),
])
def test_every_printed_xid_form_is_classified_mig_ones_too(text: str, want: tuple[str, str, int]) -> None:
    """An Xid on a MIG GPU (or in the documentation's form without `PCI:`) used to classify as no event:
    an Xid during a check on a MIG GPU passed it."""
    assert classify(text) == want
    (line,) = parse_dmesg(f"<4>[ 10.000001] {text}\n")
    assert (line.kind, line.device, line.code) == want


# amdgpu's RAS lines as the kernel prints them (torvalds/linux drivers/gpu/drm/amd/amdgpu amdgpu_ras.c,
# amdgpu_umc.c, amdgpu_device.c; the format strings are cited in kernel_log.py), with dev_info's prefix
AMD = "amdgpu 0000:0b:00.0: amdgpu: "


@pytest.mark.parametrize("text, want, count", [
    (AMD + "2 uncorrectable hardware errors detected in umc block", ("amdgpu.ue", "0000:0b:00.0", None), 1),
    (AMD + "3 correctable hardware errors detected in gfx block, no user action is needed.",
     ("amdgpu.ce", "0000:0b:00.0", None), 1),
    (AMD + "socket: 0, die: 1 4 uncorrectable hardware errors detected in umc block", ("amdgpu.ue", "0000:0b:00.0", None), 1),
    (AMD + "{3}socket: 0, die: 1, 2 new uncorrectable hardware errors detected in umc block",
     ("amdgpu.ue", "0000:0b:00.0", None), 2),
    ("amdgpu 0000:05:00.0: amdgpu: {3} socket: 0, die: 1, 2 new uncorrectable hardware errors detected in umc block",
     ("amdgpu.ue", "0000:05:00.0", None), 2),
    (AMD + "socket: 1, die: 0, 5 new deferred hardware errors detected in umc block", ("amdgpu.de", "0000:0b:00.0", None), 5),
    (AMD + "{7} socket: 1, die: 0, 1 new poison consumption detected in gfx block", ("amdgpu.de", "0000:0b:00.0", None), 1),
    (AMD + "socket: 0, die: 0, 7 new correctable hardware errors detected in umc block, no user action is needed",
     ("amdgpu.ce", "0000:0b:00.0", None), 7),
    (AMD + "0 uncorrectable hardware errors and 3 deferred hardware errors detected in UMC block",
     ("amdgpu.de", "0000:0b:00.0", None), 3),
    (AMD + "1 uncorrectable hardware errors and 3 deferred hardware errors detected in UMC block",
     ("amdgpu.ue", "0000:0b:00.0", None), 1),
    (AMD + "GPU reset begin!", ("amdgpu.reset", "0000:0b:00.0", None), 1),
    (AMD + "GPU reset begin!. Source: 3", ("amdgpu.reset", "0000:0b:00.0", None), 1),
    # the running totals after each "new" line, and a health report, are no event: nothing counts twice
    (AMD + "socket: 0, die: 1, 9 uncorrectable hardware errors detected in total in umc block", ("", "", None), 1),
    (AMD + "{3}socket: 0, die: 1, 9 deferred hardware errors detected in total in umc block", ("", "", None), 1),
    (AMD + "0 uncorrectable hardware errors detected in umc block", ("", "", None), 1),
    (AMD + "no uncorrectable hardware errors detected in umc block", ("", "", None), 1),
])
def test_amdgpu_ras_and_reset_lines_are_events_naming_the_gpu(text: str, want: tuple[str, str, None],
                                                             count: int) -> None:
    """amdgpu's RAS reports used to classify as no event: an uncorrectable error on an AMD GPU passed."""
    assert classify(text) == want
    (line,) = parse_kmsg(f"6,100,2000,-;{text}")
    assert (line.kind, line.device) == want[:2] and (not line.kind or line.count == count)


def test_amdgpu_errors_are_judged_by_count_and_the_totals_after_them_not_at_all(tmp_path: Path) -> None:
    """A `dmesg -r` window with amdgpu's new-and-total pairs logged in one microsecond: the new errors are
    counted once each (the totals skipped), uncorrectable and deferred fail, correctable within 1,000 pass."""
    def raw(lines: list[str]) -> str:
        return "".join(f"<6>[ 5000.000001] {l}\n" for l in lines)

    log = tmp_path / "dmesg"
    log.write_text(raw(["amdgpu 0000:0b:00.0: amdgpu: loaded"]))
    empty = tmp_path / "empty"
    empty.mkdir()
    src = Sources(pci=empty, ib=empty / "ib", thermal=empty, cpus=empty, cpuinfo=empty / "x", nvml=False,
                  kmsg=tmp_path / "no-kmsg", dmesg=("cat", str(log)))
    s0 = take(sources=src, host="n")
    log.write_text(raw(["amdgpu 0000:0b:00.0: amdgpu: loaded"]) + "".join(f"<6>[ 5001.000002] {AMD}{l}\n" for l in [
        "{4}socket: 0, die: 1, 2 new uncorrectable hardware errors detected in umc block",
        "{4}socket: 0, die: 1, 6 uncorrectable hardware errors detected in total in umc block",
        "{4}socket: 0, die: 1, 3 new deferred hardware errors detected in umc block",
        "{4}socket: 0, die: 1, 3 deferred hardware errors detected in total in umc block",
        "{5}socket: 0, die: 0, 40 new correctable hardware errors detected in umc block, no user action is needed",
        "{5}socket: 0, die: 0, 940 correctable hardware errors detected in total in umc block",
        "{6}socket: 0, die: 0, 60 new correctable hardware errors detected in umc block, no user action is needed",
        "{6}socket: 0, die: 0, 1000 correctable hardware errors detected in total in umc block"]))
    s1 = take(s0, src, "n")
    verdict = judge(delta(s0, s1))
    assert sorted((f.increase.name, f.increase.amount, f.passed) for f in verdict.findings) == [
        ("kernel.amdgpu.ce", 100, True), ("kernel.amdgpu.de", 3, False), ("kernel.amdgpu.ue", 2, False)]
    assert {f.increase.device for f in verdict.findings} == {"0000:0b:00.0"} and not verdict.errors


def test_lines_lost_in_one_window_do_not_keep_the_next_from_being_judged(tmp_path: Path) -> None:
    """Records overwritten before the read that closed window 1 are window 1's error; window 2 starts at
    that read's cursor and is whole. The lost error used to be carried into window 2 (its before-snapshot
    is window 1's after), and an innocent check was `not judged`. An unreadable log still carries."""
    records = lines("gpud-kmsg-nvswitch-node.txt")  # sequence numbers 3964..4010
    kmsg, empty = tmp_path / "kmsg", tmp_path / "empty"
    empty.mkdir()
    src = Sources(pci=empty, ib=empty / "ib", thermal=empty, cpus=empty, cpuinfo=empty / "x", kmsg=kmsg, nvml=False)
    write_kmsg(kmsg, records[:10])  # ..3973
    s0 = take(sources=src, host="n")
    write_kmsg(kmsg, records[20:30])  # 3984..3993: 3974..3983 overwritten before they were read
    s1 = take(s0, src, "n")
    write_kmsg(kmsg, records[20:40])
    s2 = take(s1, src, "n")
    assert [e.kind for e in judge(delta(s0, s1)).errors] == ["lost"]
    assert judge(delta(s1, s2)).errors == ()
    unreadable = Sources(pci=empty, ib=empty / "ib", thermal=empty, cpus=empty, cpuinfo=empty / "x", nvml=False,
                         kmsg=tmp_path / "no-kmsg", dmesg=("/nonexistent/dmesg",))
    s3 = take(s2, unreadable, "n")
    s4 = take(s3, src, "n")
    assert [e.reader for e in judge(delta(s3, s4)).errors] == ["kernel.log"]  # the window's start was not read


def test_a_long_dmesg_record_is_joined_and_classified_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each line joined to a record used to rebuild the record's text and classify it again: quadratic in
    the record's lines (16,000 lines of one stamp took 56 s). The joined records are the same, and each
    record is classified once, however many lines it has."""
    calls: list[str] = []
    real = kernel_log._classify

    def counting(text: str) -> tuple[str, str, int | None, int]:
        calls.append(text)
        return real(text)

    monkeypatch.setattr(kernel_log, "_classify", counting)
    dump = "".join(f"<4>[ 1843.308145] NVRM: GSP dump line {i}\n" for i in range(2000))
    raw = ("<4>[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n" + dump +
           "<4>[ 1843.308145] NVRM: fallen off the bus and is not responding to commands.\n"
           "    an indented continuation line\n"
           "<4>[ 1843.308145] NVRM: Xid (PCI:0000:b3:00): 79, GPU has fallen off the bus.\n"
           "<6>[ 1843.400000] nvidia-modeset: unrelated\n"
           "Jan 01 00:00:00 node kernel: a journal line\n")
    got = parse_dmesg(raw)
    assert [(l.kind, l.device, l.usec) for l in got] == [
        ("gpu_lost", "0000:b3:00.0", 1843308145), ("xid", "0000:b3:00", 1843308145), ("", "", 1843400000),
        ("", "", None)]
    assert got[0].text.count("\n") == 2002 and got[0].text.endswith("responding to commands.\nan indented continuation line")
    assert len(calls) == len(got) == 4


def test_a_kmsg_that_opens_and_reads_empty_is_not_judged_never_a_quiet_log(tmp_path: Path) -> None:
    """/dev/kmsg bound to /dev/null (a container's): it opens and reads nothing, which the kernel's never does
    (dmesg --clear does not empty it). It was read as an empty ring buffer, and every window after it quiet:
    an Xid could never fail a check. Now each read is an error naming it, the first too (the window it opens
    would start unread), whether dmesg fails or prints nothing (by default it reads the same /dev/kmsg); a
    dmesg with records is read instead."""
    null = Path(os.devnull)
    empty = tmp_path / "empty"
    empty.write_text("")
    for dmesg in (("/nonexistent/dmesg",), ("cat", str(empty))):
        for cursor in (None, LogCursor("kmsg", None, None)):
            after, kept, errors = window(cursor, null, dmesg)
            assert after == () and kept == cursor and [(e.reader, e.what, e.kind) for e in errors] == [
                ("kernel.log", os.devnull, "unreadable")], errors
            assert "the kernel log read empty, cleared or hidden" in errors[0].error
    xid = tmp_path / "xid"
    xid.write_text("<4>[ 1843.308145] NVRM: Xid (PCI:0000:9b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    assert window(None, null, ("cat", str(xid))) == ((), LogCursor("dmesg", None, 1843308145), ())
