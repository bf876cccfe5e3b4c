"""perftest's `ib_write_bw` (linux-rdma/perftest) output: the device, link type and the bandwidth table.

    #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
    65536      5000             92.42              92.40              0.176230

With `--report_gbits` the columns are Gb/s (10^9 bits); without it "MB/sec" is MiB/s (perftest
src/perftest_parameters.c: format_factor 0x100000 bytes, else 125000000), read here as Gb/s; a unit perftest
does not print (`Mb/sec`) is refused. A server and a client printed into one stream (a loopback run) repeat
the table, and --run_infinitely repeats a size: each size is kept once, at its worst reading. A file with a
second `Device :` unlike the first is refused (one NIC's run per file). A run cut
off before the table's closing line is `complete = False`; a failure line (`Couldn't connect`, `Failed
to ...`, `Completion with error`) is the run's failure. A table line that starts as a row does but is not
one (cut short to `8388608 5000`, a negative size, a bandwidth that is not a number) is refused naming its
line, never skipped (the size before it would be judged instead). So is a row no run of perftest can print:
a bandwidth over 0 iterations, a rate above MAX_PORT_GBPS, a BW average above its BW peak by more than a
printed step. perftest's own error lines (`Completion with error at client`, also behind a prefix such as
`ibv_poll_cq: `, `Problems with warm up`, `Failed status 12: ...`) are the run's failure wherever they stand,
in the table or after it. Never a pass by omission.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercheck.toolout import NotToolOutput, clean_lines, reading

_HEADER = re.compile(r"^\s*#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+"
                     r"BW average\[(?P<avg_unit>[^\]]+)\]\s+MsgRate\[Mpps\]")
_ROW = re.compile(r"^\s*(?P<bytes>\d+)\s+(?P<iters>\d+)\s+(?P<peak>[\d.]+)\s+(?P<avg>[\d.]+)\s+(?P<rate>[\d.]+)\s*$")
# a row's start, whatever follows: a number alone, signed or not. A row cut short (`8388608 5000`, `8388608`)
# or with a negative size fell through to the header fields and the size before it was judged, a pass
_ROW_LIKE = re.compile(r"^\s*-?\d+(\s|$)")
_KEY = re.compile(r"[A-Za-z][A-Za-z .*/-]*")
_VALUE = re.compile(r"\s*(\S*)")
# perftest's error lines (src/*.c, fprintf(stderr, ...)): at a line's start, or, for the two that only a failed
# run prints, anywhere in it (a wrapper's `ibv_poll_cq: ` before `Completion with error` hid it, and the run passed)
_FAILURE = re.compile(r"^\s*(Couldn't|Unable to|Failed\b|IB device \S+ not found|No IB devices found|ERRNO|Error[: ]|"
                      r"Did not get Message|Can't produce a report)|"
                      r"Completion wi?th error|Problems with warm up", re.IGNORECASE)
# perftest's table headers (src/perftest_parameters.h): RESULT_FMT `BW peak[MB/sec]` (MiB/s, format_factor
# 0x100000; newer builds print `MiB/sec`) and RESULT_FMT_G `BW peak[Gb/sec]` (--report_gbits). No other unit:
# a `Mb/sec` read with no factor would make 9000 Mb/s 9000 Gb/s, so any other is refused, never guessed
_GBPS_PER = {"Gb/sec": 1.0, "MB/sec": 1048576 * 8 / 1e9, "MiB/sec": 1048576 * 8 / 1e9}
# A rate no NIC port reaches: the fastest ports shipping carry 800 Gb/s (XDR InfiniBand, 800GbE), 1.6 Tb/s is
# on the roadmaps, and a bidirectional run sums two directions. 100 Tb/s per port stays far above any of them for
# years, so a reading above it is a garbled or edited row (99999999.39 Gb/s passed a 90 Gb/s floor), no measurement
MAX_PORT_GBPS = 100_000.0


@dataclass(frozen=True)
class Row:
    bytes: int
    iterations: int
    peak_gbps: float | None     # None where perftest did not measure it (--run_infinitely prints 0.00)
    avg_gbps: float
    msg_rate_mpps: float
    line: int


@dataclass(frozen=True)
class IbWriteBw:
    test: str                   # "RDMA_Write BW Test"
    device: str | None
    link_type: str | None       # IB, Ethernet (RoCE)
    unit: str                   # as printed: Gb/sec or MB/sec
    rows: tuple[Row, ...]
    complete: bool              # the table's closing line was printed
    failure: str | None

    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.bytes) if self.rows else None


def parse(text: str) -> IbWriteBw:
    lines = clean_lines(text)
    test = next((l.strip() for l in lines if l.strip().endswith("BW Test")), None)
    if test is None:
        raise NotToolOutput("expected perftest output ('RDMA_Write BW Test' header, then '#bytes #iterations BW peak...')")
    fields: dict[str, str] = {}
    unit = ""
    rows: dict[int, Row] = {}
    complete = False
    failure = None
    in_table = False
    for at, line in enumerate(lines, 1):
        if _FAILURE.search(line) and failure is None:
            failure = f"line {at}: {line.strip()}"
        m = _HEADER.match(line)
        if m:
            if m.group("avg_unit") != m.group("unit"):  # perftest prints one unit for both: the average is judged
                raise NotToolOutput(f"line {at}: the average's unit {m.group('avg_unit')!r} is not the peak's "
                                    f"{m.group('unit')!r}, which perftest always prints alike")
            if m.group("unit") not in _GBPS_PER:
                raise NotToolOutput(f"line {at}: bandwidth in {m.group('unit')!r}, a unit perftest does not print "
                                    f"(it prints {', '.join(_GBPS_PER)})")
            unit, in_table = m.group("unit"), True
            continue
        r = _ROW.match(line) if in_table else None
        if r:
            factor = _GBPS_PER[unit]
            peak, avg, rate = (_reading(r.group(k), at, line) for k in ("peak", "avg", "rate"))
            _measured(r, peak * factor, avg * factor, at, line)
            row = Row(int(r.group("bytes")), int(r.group("iters")), peak * factor if peak > 0 else None,
                      avg * factor, rate, at)
            seen = rows.get(row.bytes)
            if seen is None or row.avg_gbps < seen.avg_gbps:  # a size printed twice (server and client, or
                rows[row.bytes] = row                           # --run_infinitely): its worst reading counts
        elif in_table and _ROW_LIKE.match(line):  # a row cut short, signed or not numbers: never skipped
            raise NotToolOutput(f"line {at}: a bandwidth row that is not numbers (#bytes #iterations BW peak "
                                f"BW average MsgRate, unsigned): {line.strip()[:120]!r}")
        elif in_table and line.strip().startswith("----") and rows:
            complete = True
        else:  # a header line, also of a second run's header after the first table
            for key, value in fields_of(line):
                if key == "Device" and fields.get(key, value) != value:
                    # its rows would be named after the first device: one NIC's run per file
                    raise NotToolOutput(f"line {at}: a second device {value!r} after {fields[key]!r}: one NIC's run "
                                        f"per file (split the capture per device)")
                fields.setdefault(key, value)
    if not unit:
        raise NotToolOutput("perftest output without its '#bytes #iterations BW peak[...]' table header: the run "
                            "stopped before measuring" + (f" ({failure})" if failure else ""))
    return IbWriteBw(test, fields.get("Device"), fields.get("Link type"), unit, tuple(rows.values()), complete,
                     failure)


def failure_in(text: str) -> str | None:
    """The first failure line, as printed, of an output parse() does not take (a server that could not connect,
    the stderr perftest prints its errors to); None where there is none."""
    return next((line.strip() for line in clean_lines(text) if _FAILURE.search(line)), None)


def fields_of(line: str) -> list[tuple[str, str]]:
    """The `key : value` pairs of a header line, two to a line as perftest prints them (`Dual-port : OFF
    Device : mlx5_0`); a value is the word after the colon (`GID: 00:00:...:12` keeps its colons). One pass
    from colon to colon (str.find), linear in the line: a lazy pattern tried at every offset was quadratic."""
    out: list[tuple[str, str]] = []
    colon = line.find(":")
    key = line[:colon].strip()
    while colon >= 0:
        v = _VALUE.match(line, colon + 1)
        assert v is not None  # \s*(\S*) matches at any offset
        if v.group(1) and _KEY.fullmatch(key):
            out.append((key, v.group(1)))
        colon = line.find(":", v.end())
        key = line[v.end():colon].strip()
    return out


def _reading(token: str, at: int, line: str) -> float:
    """One of a row's numbers: `[0-9.]+` also takes "92.3.9" and ".", which are no reading perftest printed
    (its %.2f and %.6f): refused naming the line, as any row that is not numbers is."""
    value = reading(token)  # the row's pattern takes no sign: nothing negative reaches here
    if value is None:
        raise NotToolOutput(f"line {at}: a bandwidth row that is not numbers: {line.strip()[:120]!r}")
    return value


def _measured(r: re.Match[str], peak_gbps: float, avg_gbps: float, at: int, line: str) -> None:
    """A row no perftest run prints, refused naming its line: its average is the bytes of its iterations over
    their time (print_report_bw; a -D run counts its iterations too), so none is positive over 0 iterations;
    its peak is the fastest window of the same iterations, the whole run among them, so the average is never
    above it by more than a printed step (both are rounded alike; a truncated cycle count may tip one step);
    and no port reaches MAX_PORT_GBPS."""
    shown = f"{line.strip()[:120]!r}"
    if int(r.group("iters")) == 0 and (avg_gbps > 0 or peak_gbps > 0):
        raise NotToolOutput(f"line {at}: a bandwidth over 0 iterations, which perftest cannot have measured: {shown}")
    for name, value in (("BW peak", peak_gbps), ("BW average", avg_gbps)):
        if value > MAX_PORT_GBPS:
            raise NotToolOutput(f"line {at}: {name} {value:.2f} Gb/s, above the {MAX_PORT_GBPS:g} Gb/s no NIC port "
                                f"reaches: not a measurement: {shown}")
    peak, avg = r.group("peak"), r.group("avg")
    step = max(_step(peak), _step(avg))
    if peak_gbps > 0 and float(avg) - float(peak) > step * 1.000001:  # 0.00 is a peak not measured
        raise NotToolOutput(f"line {at}: BW average {avg} above BW peak {peak} by more than the printed step "
                            f"{step:g}, which perftest cannot print (its peak is its fastest window): {shown}")


def _step(token: str) -> float:
    """One unit in the last printed place of a number as perftest prints it (%.2f, or %.6f for -ext)."""
    return 10.0 ** -len(token.partition(".")[2])
