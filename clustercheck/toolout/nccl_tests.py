"""nccl-tests / rccl-tests output (`all_reduce_perf` and the other `*_perf` binaries) -> NcclTestsRun.

Formats, as the sources print them (NVIDIA/nccl-tests src/common.cu + src/util.cu, ROCm/rccl-tests
src/common.cu, NVIDIA/nccl 1.x test/single/*_test.cu):

- current (nccl-tests 2022-08 on): `size count type redop root`, then per placement `time algbw busbw
  #wrong`; `# nccl-tests version` and `# Collective test starting:` banners (2025 on); optional
  per-iteration (`i_min` ...) and `timestamp` columns, `cputime` instead of `time`;
- older (2019-03 to 2022-08): an `error` column (largest deviation) instead of `#wrong`, and only the
  descriptor columns the collective has (all_gather: neither redop nor root; alltoall: a blank redop);
- NCCL 1.x and the first nccl-tests (2017-2019): `bytes N type op ... res`, time in **ms**, footer and
  `nThread` lines without '#';
- rccl-tests: a `rccl-tests: Version` line, PCI ids like `0000:05:00.0`, in-place-only tables;
- lines prefixed by `srun --label` or `mpirun --tag-output`, NCCL INFO/WARN lines in between (even glued
  onto a row; each WARN and error-return trace is kept in `nccl_errors`), nccl-tests' `# error: <NCCL's
  last error>` after the footer (`last_error`), and the `-J FILE.json` output (`nccl_tests_json`, its
  `errors` list). nccl-tests has no CSV option.

A run that crashed (`Test NCCL failure`, `Test CUDA failure`, an MPI abort banner), whose table stops
without its `Out of bounds values` footer or whose footer stops before its `Avg bus bandwidth` line (or
has one that is not a finite number >= 0) is parsed with `failure` set to the line that says so; so is
one whose `Out of bounds values` says FAILED or counts above 0 (`failed`: nccl_footer.py, the JSON's rule).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from clustercheck.fabric import nccl_debug, transport
from clustercheck.toolout import NotFinite, NotToolOutput, clean_lines, count, evidence_lines, number
from clustercheck.toolout.nccl_footer import AVG, OOB, avg_value, bounds_failure
from clustercheck.toolout.nccl_measured import implausible, printed
from clustercheck.toolout.nccl_run import (NCCL_TESTS_COLLECTIVES, PLACEMENTS, NcclTestsRun, Placement, RankInfo, Row, headline,
                                           inferred_ranks, per_size, version_of)

__all__ = ["NcclTestsRun", "Placement", "RankInfo", "Row", "headline", "inferred_ranks", "parse", "per_size"]

# Counts are bounded ({1,9}, {1,20}): a longer run of digits is no rank, size or count any tool printed,
# and int() of thousands of digits raises.
_RANK = re.compile(r"^#\s*Rank\s+(?P<rank>\d{1,9})(?:\s+Group\s+\d{1,9})?(?:\s+Pid\s+(?P<pid>\d{1,12}))?\s+"
                   r"(?:on\s+(?P<host>\S+)\s+device|uses device)\s+(?P<dev>\d{1,9})\s+\[(?P<bus>[^\]]*)\]\s*(?P<model>.*)$")
_PARAMS = re.compile(r"^#?\s*nThread (?P<threads>\d{1,9}) nGpus (?P<gpus>\d{1,9}) minBytes (?P<min>\d{1,20}) "
                     r"maxBytes (?P<max>\d{1,20})(?: step: (?P<step>\d{1,20})\((?P<how>factor|bytes)\))?")
_VALIDATION = re.compile(r"validation: (\d{1,9})")
_REDUCED = re.compile(r"Reducing maxBytes to (\d{1,20})")
_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version (?P<v>\S+)(?: nccl-headers=\d{1,12} nccl-library=(?P<lib>\d{1,12}))?")
_RCCL_TESTS = re.compile(r"^rccl-tests: Version (\S+)")
_RCCL_VERSION = re.compile(r"\bRCCL version (\d+\.\d+\.\d+\S*)")
_BANNER = re.compile(r"^#\s*Collective test (?:starting|concluded): (?P<name>\w+?)_perf")
_BINARY = re.compile(rf"\b({'|'.join(NCCL_TESTS_COLLECTIVES)})_perf")
_LAST_ERROR = re.compile(r"^#\s*error:\s*(.+)$")
_NCCL_MSG = re.compile(r"NCCL (?:INFO|WARN) ")
_MSG_PREFIX = re.compile(r"[^\s:\[\]]+:\d+:\d+ \[\d+\] $")   # host:pid:tid [dev] before the message
_ELISION = re.compile(r"^#\s*Truncated\b|^\s*\[\.\.\.\]$|^\s*\.{3,}$", re.IGNORECASE)
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d$")
# Crash lines, most telling first: nccl-tests' own NCCLCHECK/CUDACHECK/TESTCHECK messages, then launchers.
# Plain substrings where the text is fixed (a scan of a long line by a handful of regexes costs seconds).
_FAILURES: tuple[tuple[tuple[str, ...], re.Pattern[str] | None], ...] = (
    (("Test NCCL failure", "Test CUDA failure", "Test HIP failure", "Test timeout (", "Invalid number of GPUs"), None),
    ((": Test failure ",), None),
    (("MPI_ABORT was invoked", "MPI_Abort(", "mpirun noticed that process", "mpirun has exited due to",
      "mpirun detected that one or more processes exited"), None),
    (("Primary job",), re.compile(r"Primary job\s+terminated normally, but")),
    (("srun: error: ",), re.compile(r"^srun: error: .*(?:exit code [1-9]|Terminated|Killed|Segmentation|Aborted)")),
    (("Segmentation fault", "Bus error", "Aborted (core dumped)", "terminate called after throwing", "Caught signal"),
     None),
)
_PRIORITY = (0, 1, 2, 2, 3, 4)   # MPI's two kinds of line are one priority


@dataclass(frozen=True)
class _Layout:
    descriptors: tuple[str, ...]   # header names before the first time column
    groups: tuple[str, ...]        # placements in print order
    width: int                     # columns per placement (4, 8 with per-iteration columns)
    check: str                     # "#wrong", "error" or "res"
    timestamp: bool
    time_ms: bool
    cputime: bool                  # the time column is the CPU time, not the one the bandwidths come from


def parse(text: str, binary: str | None = None) -> NcclTestsRun:
    """Parse one run's output. `binary` (e.g. "all_reduce_perf") names the collective when the caller
    ran it; otherwise the banner, a command line in the text, or the columns do."""
    body = "\n".join(evidence_lines(text))   # a fixture's source note may precede JSON too
    if body.lstrip().startswith("{"):
        from clustercheck.toolout import nccl_tests_json

        return nccl_tests_json.parse(body, binary)
    raw_count = len(text.replace("\r\n", "\n").split("\n"))
    lines = clean_lines(text)
    offset = raw_count - len(lines)
    st = _State()
    for index, line in enumerate(lines):
        st.feed(line, index + 1 + offset)
    run = st.finish(text, binary)
    # NCCL's own warnings between the rows (a completion error, a Cuda failure): the run's results cannot be
    # trusted whatever its table says; numbered by the file's lines, the source note included
    found = transport.errors("\n".join(lines))
    return dataclasses.replace(run, nccl_errors=tuple(dataclasses.replace(e, line=e.line + offset) for e in found))


class _State:
    def __init__(self) -> None:
        self.ranks: list[RankInfo] = []
        self.rows: list[Row] = []
        self.params: dict[str, int] = {}
        self.layout: _Layout | None = None
        self.header_line = 0
        self.group_line = ""
        self.prev = ""
        self.oob: int | None = None
        self.oob_line = 0
        self.oob_text = ""
        self.bounds: str | None = None   # what fails the out-of-bounds line (nccl_footer.bounds_failure)
        self.bounds_line: int | None = None   # that line, once it is the run's failure
        self.avg_seen = False
        self.avg: float | None = None
        self.avg_check: str | None = None
        self.tests_version: str | None = None
        self.lib_code: int | None = None
        self.tool = "nccl-tests"
        self.banner: str | None = None
        self.binary: str | None = None
        self.last_error: str | None = None
        self.failures: list[tuple[int, int, str]] = []   # (priority, line, text)
        self.bad_row: tuple[int, str, str] | None = None   # (line, text, what is wrong with it)
        self.bad_footer: tuple[int, str] | None = None
        self.notes: list[str] = []
        self.step: tuple[int, str] | None = None
        self.reduced_from: int | None = None
        self.unread: list[tuple[int, str]] = []

    def feed(self, line: str, number_: int) -> None:
        m = _NCCL_MSG.search(line)
        if m:  # an NCCL message: keep whatever the tool printed before it on the same line
            line = line[:_message_start(line, m.start())].rstrip()
        s = line.strip()
        if not s:
            return
        self._failure(s, number_)
        b = _BINARY.search(s) if self.binary is None and "_perf" in s else None
        if b and self.binary is None:
            self.binary = b.group(1)
        if self._meta(s, number_):
            self.prev = s
            return
        if self.layout is not None and s[0].isdigit():
            row = _row(s, number_, self.layout)
            if isinstance(row, str):
                self.bad_row = self.bad_row or (number_, s, row)
                self.unread.append((number_, row))
            else:
                self.rows.append(row)
        self.prev = s

    def _meta(self, s: str, n: int) -> bool:
        """Header, banner, rank and footer lines; True when the line was one."""
        if _ELISION.match(s) or _dashed_truncation(s):
            self.notes.append(f"line {n}: an elision in the source ({s.strip('#- ')[:60]})")
            return True
        for rx, act in ((_RANK, self._rank), (_PARAMS, self._params), (_TESTS_VERSION, self._version)):
            m = rx.match(s)
            if m:
                act(m, s)
                return True
        m = _BANNER.match(s)
        if m:
            self.banner = m.group("name")
            return True
        if _RCCL_TESTS.match(s):
            self.tool = "rccl-tests"
            return True
        m = _REDUCED.search(s)
        if m:
            self.reduced_from = self.params.get("max")
            self.params["max"] = int(m.group(1))
            return True
        m = OOB.match(s)
        if m:
            self.oob = int(m.group(1))
            self.oob_line = n
            self.bounds = bounds_failure(self.oob, None if m.group(2) is None else m.group(2) == "OK")
            self.oob_text = s
            return True
        m = AVG.match(s)
        if m:
            self.avg_seen = True
            value = avg_value(m.group(1) or "")
            if isinstance(value, str):
                self.bad_footer = self.bad_footer or (n, value)
            else:
                self.avg = value
            self.avg_check = m.group(2)
            return True
        m = _LAST_ERROR.match(s)
        if m:
            self.last_error = m.group(1)
            return True
        tokens = s.lstrip("#").split() if "algbw" in s and "busbw" in s else []
        if "algbw" in tokens and "busbw" in tokens and ("size" in tokens or "bytes" in tokens):
            if self.rows:  # judging the first run alone would hide the others' results
                raise NotToolOutput(f"line {n}: a second result table (the first is at line {self.header_line}): "
                                    f"give one nccl-tests run per file")
            self.layout = _layout(tokens, self.prev)
            self.header_line = n
            return True
        return s.startswith("#")

    def _rank(self, m: re.Match[str], s: str) -> None:
        self.ranks.append(RankInfo(int(m.group("rank")), m.group("host"), int(m.group("pid")) if m.group("pid")
                                   else None, int(m.group("dev")), m.group("bus"), m.group("model").strip()))
        if m.group("host") is None:
            self.tool = "nccl1"

    def _params(self, m: re.Match[str], s: str) -> None:
        self.params.update(threads=int(m.group("threads")), gpus=int(m.group("gpus")), max=int(m.group("max")),
                           min=int(m.group("min")))
        if m.group("step"):
            self.step = (int(m.group("step")), m.group("how"))
        v = _VALIDATION.search(s)
        if v:
            self.params["validation"] = int(v.group(1))

    def _version(self, m: re.Match[str], s: str) -> None:
        self.tests_version = m.group("v")
        self.lib_code = int(m.group("lib")) if m.group("lib") else None

    def _failure(self, s: str, n: int) -> None:
        for priority, (words, rx) in zip(_PRIORITY, _FAILURES):
            if any(w in s for w in words) and (rx is None or rx.search(s)):
                self.failures.append((priority, n, s.strip()))
                return

    def finish(self, text: str, binary: str | None) -> NcclTestsRun:
        nccl_failure = any(p == 0 for p, _, _ in self.failures)
        if not (self.rows or self.layout or self.ranks or self.params or self.tests_version or self.banner
                or self.oob is not None or self.avg is not None or nccl_failure or (self.binary and self.failures)):
            raise NotToolOutput("expected nccl-tests or rccl-tests output (an all_reduce_perf-style table with "
                                "'size count type ... algbw busbw' columns, '#  Rank' lines or 'Test NCCL failure')")
        failure, line = self._verdict_failure()
        kind = None if failure is None else "crashed" if self.failures else "failed" if line == self.bounds_line \
            else "incomplete"
        debug = nccl_debug.parse(text)
        rccl = _RCCL_VERSION.search(text)
        if rccl:
            self.tool = "rccl-tests"
        version = rccl.group(1) if rccl else debug.versions[0] if debug.versions else version_of(self.lib_code)
        layout = self.layout
        name, source = _collective(binary, self.banner, self.binary, layout, self.rows, len(self.ranks))
        fmt = {"#wrong": "wrong"}.get(layout.check, layout.check) if layout else "wrong"
        return NcclTestsRun(
            self.tool, fmt, name, source, tuple(self.ranks), tuple(self.rows), self.params.get("threads"),
            self.params.get("gpus"), self.params.get("max"), self.params.get("validation"), self.oob, self.avg,
            self.avg_check, version, self.tests_version, self.last_error, failure, line, kind, debug.info_lines,
            tuple(self.notes), tuple(self.unread), self.params.get("min"), self.step, reduced_from=self.reduced_from)

    def _verdict_failure(self) -> tuple[str | None, int | None]:
        if self.failures:
            _, n, s = min(self.failures)
            return f"line {n}: {s}", n
        if self.bad_row:
            n, s, why = self.bad_row
            return f"line {n}: a table row {why}: {s[:120]!r}", n
        if self.bad_footer:
            n, why = self.bad_footer
            return f"line {n}: {why}", n
        if self.bounds:  # the tool's own data check failed: the table reached its footer
            self.bounds_line = self.oob_line
            return f"line {self.oob_line}: {self.oob_text!r}: {self.bounds}", self.oob_line
        if self.layout and not self.rows:
            return f"line {self.header_line}: the table header has no rows after it: the run stopped", self.header_line
        if self.rows and self.oob is None:
            last = self.rows[-1]
            return (f"line {last.line}: the table stops at {last.size} B without its 'Out of bounds values' "
                    f"footer: the run was cut off, or this is an excerpt"), last.line
        if self.oob is not None and not self.avg_seen:  # nccl-tests prints the two lines together
            return (f"line {self.oob_line}: the 'Out of bounds values' footer has no 'Avg bus bandwidth' line after "
                    f"it: the run was cut off"), self.oob_line
        if not self.layout and (self.ranks or self.params):
            return "no result table: the run stopped before its first row", None
        return None, None


def _layout(tokens: list[str], group_line: str) -> _Layout:
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    first = times[0] if times else len(tokens)
    rest = tokens[first:]
    timestamp = bool(rest) and rest[-1] == "timestamp"
    if timestamp:
        rest = rest[:-1]
    groups_n = max(1, len(times))
    width = len(rest) // groups_n if rest else 4
    check = next((t for t in rest if t in ("#wrong", "error", "res")), "#wrong")
    out_at, in_at = group_line.find("out-of-place"), group_line.find("in-place")
    if out_at >= 0 and in_at >= 0 and groups_n == 2:
        groups: tuple[str, ...] = PLACEMENTS if out_at < in_at else PLACEMENTS[::-1]
    elif groups_n == 1:
        groups = ("in_place",) if in_at >= 0 and out_at < 0 else ("out_of_place",)
    else:
        groups = PLACEMENTS[:groups_n]
    return _Layout(tuple(tokens[:first]), groups, width, check, timestamp, check == "res", "cputime" in tokens[first:first + 1])


def _message_start(line: str, at: int) -> int:
    """Where the NCCL message that names itself at `at` starts: at its `host:pid:tid [dev] ` prefix when it
    has one. The prefix is looked for in a bounded window, so a long line costs linear time."""
    m = _MSG_PREFIX.search(line, max(0, at - 300), at)
    return m.start() if m else at


def _dashed_truncation(s: str) -> bool:
    """`----- some output truncated -----`, an author's elision (a plain string test: a regex with `.*`
    between two runs of dashes takes quadratic time on a long line of dashes)."""
    return s.startswith("---") and s.endswith("---") and "truncated" in s.lower()


_GARBLED = "cut short or garbled"


def _row(s: str, line: int, layout: _Layout) -> Row | str:
    """One table row, or what is wrong with it."""
    tokens = s.split()
    if layout.timestamp:
        if len(tokens) < 2 or not _TIMESTAMP.match(tokens[-2]):
            return _GARBLED
        tokens = tokens[:-2]
    k = len(layout.groups) * layout.width
    desc, meas = tokens[:-k], tokens[-k:]
    if len(desc) < 3 or len(desc) > max(3, len(layout.descriptors)) or not all(
            count(t, 20) is not None for t in desc[:2]):
        return _GARBLED
    redop: str | None = None
    root: int | None = None
    for tok in desc[3:]:
        if re.fullmatch(r"-?\d{1,12}", tok):
            root = int(tok)
        else:
            redop = tok
    halves: dict[str, Placement] = {}
    try:
        for i, group in enumerate(layout.groups):
            cols = meas[i * layout.width:(i + 1) * layout.width]
            time, alg, bus = (number(c) for c in cols[:3])
            if time is None or alg is None or bus is None:
                return _GARBLED
            check = number(cols[3])
            wrong, error = (check, None) if layout.check == "#wrong" else (None, check)
            place = group.replace("_", "-")
            for name, value in (("time", time), ("algbw", alg), ("busbw", bus), (layout.check, check)):
                if value is not None and value < 0:
                    return f"with {place} {name} {value:g}, below 0 (no tool measures that)"
            if wrong is not None and wrong != int(wrong):
                return f"with {place} #wrong {wrong:g}, not a whole count of elements"
            half = Placement(time * 1000.0 if layout.time_ms else time, alg, bus, wrong, error)
            if why := implausible(place, half, int(desc[0]), printed(cols, layout.time_ms), layout.cputime,
                                  layout.descriptors[:1] != ("bytes",)):   # NCCL 1.x: busbw up to (n-1) x algbw
                return f"with {why}"
            halves[group] = half
    except NotFinite as exc:
        return f"with a value that is not a number ({exc})"
    except (ValueError, IndexError):
        return _GARBLED
    return Row(int(desc[0]), int(desc[1]), desc[2], redop, root, halves.get("out_of_place"), halves.get("in_place"),
               line)


_REDUCTIONS = ("sum", "prod", "max", "min", "avg", "mulsum", "premulsum")


def _collective(binary: str | None, banner: str | None, seen: str | None, layout: _Layout | None,
                rows: list[Row], nranks: int) -> tuple[str | None, str]:
    if binary:
        m = _BINARY.search(binary) or re.search(r"(\w+?)(?:_perf)?$", binary)
        return (m.group(1) if m else binary), "binary name"
    if banner:
        return banner, "banner"
    if seen:
        return seen, "binary name"
    ratio = _ratio(rows)
    if ratio is not None and ratio > 1.005:
        return "all_reduce", "busbw/algbw ratio"   # only all_reduce has a factor above 1: 2(n-1)/n
    redops = {r.redop for r in rows if r.redop is not None}
    if layout is not None and ratio is not None and ratio < 0.995:
        if "redop" not in layout.descriptors and "op" not in layout.descriptors and "root" not in layout.descriptors:
            return "all_gather", "columns"         # the older all_gather table has neither column
        if redops and redops <= set(_REDUCTIONS):
            return "reduce_scatter", "columns"     # (n-1)/n with a reduction: not all_gather, not alltoall
    roots = {r.root for r in rows if r.root is not None}
    if roots and min(roots) >= 0:
        return ("reduce" if redops & set(_REDUCTIONS) else "broadcast"), "columns"
    return None, "unknown"


def _ratio(rows: list[Row]) -> float | None:
    """busbw/algbw of the placement with the highest algbw (small values are too rounded to use)."""
    best = max((p for r in rows for _, p in r.placements()), key=lambda p: p.algbw, default=None)
    return best.busbw / best.algbw if best and best.algbw >= 1.0 else None
