"""NVIDIA GPUDirect Storage's `gdsio` result lines, with the command line before each where a capture
has it (it names the GPU, `-d`, that the result line does not):

    $ gdsio -f /mnt/nvme-raid/test.bin -x 0 -d 1 -s 50G -I 1 -i 1G
    IoType: WRITE XferType: GPUD Threads: 1 DataSetSize: 52428800/52428800(KiB) IOSize: 1048576(KiB)
    Throughput: 25.034021 GiB/sec, Avg_Latency: 38861.360000 usecs ops: 50 total_time 1.997282 secs

XferType GPUD is GPUDirect Storage (storage to GPU memory, no bounce through the CPU); CPUONLY, CPU_GPU
and the others go through host memory (NVIDIA GDS benchmarking guide, gdsio -x). A line that says an
error is the run's failure; a text without a result line is not gdsio output, and so is a result line whose
throughput, latency or time does not read as a number >= 0 (`1.2.22.0`, nan, a negative), or whose
throughput is positive over 0 ops, 0 seconds or 0 KiB done, or is not the KiB done over total_time beyond
print rounding (gdsio's throughput is just that, in every public capture, -T runs that loop past their file
among them). An Avg_Latency of 0 beside ops and time is read: gdsio -V prints it so for runs it measured, and
the latency is shown, never judged. A command line
naming a GPU or a file (`-d`, `-f`, `-D`) that no result line follows before the next command or the end is
kept in `cut_off`: that run printed nothing, and its GPU was never measured.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from clustercheck.toolout import NotToolOutput, clean_lines, reading

_RESULT = re.compile(
    # batch mode (-x 6, GPU_BATCH) prints its queue depth between Threads and DataSetSize
    r"IoType: (?P<io>\w+) XferType: (?P<xfer>\w+) Threads: (?P<threads>\d+) (?:IoDepth: \d+ )?"
    r"DataSetSize: (?P<done>\d+)"
    r"(?:/(?P<asked>\d+))?\(KiB\) IOSize: (?P<iosize>[\d-]+)\(KiB\) Throughput: (?P<gibs>[\d.eE+-]+|nan|inf) GiB/sec, "
    r"Avg_Latency: (?P<lat>[\d.eE+-]+|nan|inf) usecs ops: (?P<ops>\d+) total_time (?P<secs>[\d.eE+-]+) secs")
_COMMAND_MAX = 4096
# searched in the lowercased line: with IGNORECASE and no first-letter filter the engine tried every word
# boundary of a long line (0.65 s of CPU for 8 MiB of " 1"); this form takes 0.1 s there
_FAILURE = re.compile(r"(?=[acefs])\b(?:error|failed|failure|aborted|core dumped|segmentation fault)\b")


@dataclass(frozen=True)
class Result:
    io: str              # READ, WRITE, RANDREAD, RANDWRITE
    xfer: str            # GPUD, CPUONLY, CPU_GPU, CPU_ASYNC_GPU, CPU_CACHED_GPU, GPUD_ASYNC, GPU_BATCH ...
    threads: int
    gibs: float          # Throughput, GiB/s
    latency_us: float
    ops: int
    seconds: float
    gpu: int | None      # -d of the command line before it, when the capture has one
    target: str | None   # -f FILE or -D DIR of that command line
    line: int

    @property
    def direct(self) -> bool:
        return self.xfer.startswith("GPUD") or self.xfer == "GPU_BATCH"


@dataclass(frozen=True)
class Command:
    """A gdsio command line that printed no result line: the run was cut off (or its line lost)."""
    gpu: int | None      # -d
    target: str | None   # -f FILE or -D DIR
    line: int


@dataclass(frozen=True)
class Gdsio:
    results: tuple[Result, ...]
    failure: str | None
    cut_off: tuple[Command, ...] = ()


def _command(line: str) -> tuple[int | None, str | None] | None:
    if "gdsio" not in line or "IoType:" in line:
        return None
    rest = line.split("gdsio", 1)[1]
    try:  # shlex reads a character at a time: a line longer than any command is split on blanks alone
        words = shlex.split(rest) if len(rest) <= _COMMAND_MAX else rest.split()
    except ValueError:
        words = rest.split()
    gpu = target = None
    for flag, value in zip(words, words[1:]):
        if flag == "-d" and value.isdigit():
            gpu = int(value)
        elif flag in ("-f", "-D"):
            target = value
    return gpu, target


def parse(text: str) -> Gdsio:
    results: list[Result] = []
    failure = None
    gpu: int | None = None
    target: str | None = None
    pending: Command | None = None  # the last command line naming a GPU or file, until a result follows it
    cut_off: list[Command] = []
    for at, line in enumerate(clean_lines(text), 1):
        cmd = _command(line)
        if cmd is not None:
            if pending is not None:
                cut_off.append(pending)
            gpu, target = cmd
            pending = Command(gpu, target, at) if gpu is not None or target is not None else None
            continue
        m = _RESULT.search(line)
        if m is None and "IoType:" in line:  # a result line whose numbers do not read: refused, never skipped
            raise NotToolOutput(f"line {at}: a result line that does not read as gdsio's: {line.strip()[:120]!r}")
        if m is None:
            if failure is None and line.strip() and _FAILURE.search(line.lower()):
                failure = f"line {at}: {line.strip()[:200]}"
            continue
        gibs, lat, secs = (_reading(m.group(k), at, line) for k in ("gibs", "lat", "secs"))
        _consistent(m, gibs, secs, at, line)
        _done_over_time(m, gibs, secs, at, line)
        results.append(Result(m.group("io"), m.group("xfer"), int(m.group("threads")), gibs, lat, int(m.group("ops")),
                              secs, gpu, target, at))
        gpu = target = pending = None  # a command line belongs to the result after it only
    if pending is not None:
        cut_off.append(pending)
    if not results:
        raise NotToolOutput("expected gdsio output ('IoType: READ XferType: GPUD Threads: ... Throughput: N GiB/sec')"
                            + (f"; {failure}" if failure else ""))
    return Gdsio(tuple(results), failure, tuple(cut_off))


def _reading(token: str, at: int, line: str) -> float:
    """A throughput, latency or time of a result line: the pattern also takes "1.2.22.0" and "-1", which no
    gdsio run printed (a rate, a duration); refused naming the line, never a traceback or a result."""
    value = reading(token)
    if value is None:
        raise NotToolOutput(f"line {at}: a throughput, latency or time that is not a number >= 0 ({token!r}): "
                            f"{line.strip()[:120]!r}")
    return value


def _consistent(m: re.Match[str], gibs: float, secs: float, at: int, line: str) -> None:
    """A throughput over nothing moved, no operation or no time is no measurement gdsio made (it divides the
    bytes done by the time taken): such a line passed on its throughput alone. DataSetSize's done may exceed
    what was asked, as a timed run (-T) loops over its file (`16629760/10485760(KiB)`), so that is not refused."""
    if gibs <= 0:
        return
    why = ("0 ops" if int(m.group("ops")) == 0 else "a total_time of 0" if secs == 0
           else "a DataSetSize of 0 KiB done" if int(m.group("done")) == 0 else None)
    if why is not None:
        raise NotToolOutput(f"line {at}: a throughput of {gibs:g} GiB/s over {why}, which gdsio cannot have "
                            f"measured: {line.strip()[:120]!r}")


_KIB_PER_GIB = 1 << 20


def _done_over_time(m: re.Match[str], gibs: float, secs: float, at: int, line: str) -> None:
    """gdsio's throughput is the KiB done over total_time, in GiB/s: every public capture agrees to its
    printed digits, timed runs (-T) that loop past the size asked among them. A throughput that is not (25.11
    GiB/s beside 1 GiB done in 1.99 s, or 0 GiB/s beside 50 GiB done) is no line gdsio printed. The bounds are
    print rounding alone, taken wide: a step of the throughput's last digit, and the time anywhere within a
    step of its own (DataSetSize is whole KiB, as every IOSize is); a time within a step of 0 bounds it below only."""
    if secs == 0:  # a positive throughput over it is refused already; 0 over 0 s moved nothing
        return
    done = int(m.group("done")) / _KIB_PER_GIB
    g_step, t_step = _step(m.group("gibs")), _step(m.group("secs"))
    low = done / (secs + t_step) - g_step
    high = done / (secs - t_step) + g_step if secs > t_step else float("inf")
    if not low <= gibs <= high:
        raise NotToolOutput(f"line {at}: a throughput of {gibs:g} GiB/s where its {m.group('done')} KiB done over "
                            f"{m.group('secs')} s make {done / secs:.6f} GiB/s, beyond print rounding; gdsio prints "
                            f"the one over the other: {line.strip()[:120]!r}")


def _step(token: str) -> float:
    """One unit in the last printed place of a number as gdsio prints it (%f: 6 decimals); 1 for a whole number
    or an exponent form, which gdsio does not print (wide, so such a token is never refused for its rounding)."""
    whole, dot, decimals = token.partition(".")
    return 10.0 ** -len(decimals) if dot and decimals.isdigit() else 1.0
