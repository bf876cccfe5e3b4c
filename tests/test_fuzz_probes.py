"""Fuzzing every probe parser (hypothesis) with mutations of the real captures in tests/fixtures/tool-outputs:
a subject dropped, listed twice or moved; a judged number made nan, inf, 1e400 or negative; the capture
cut short; a long line or binary bytes put in. Each case goes through the real command,
`clustercheck probe NAME --input FILE`, with the expectations a platform would give for the original
(its GPU count, its NVLinks per GPU), and must:

- end without a traceback, in time linear in its size;
- be refused (4), failed (1) or judged nothing (5) when a judged number is no number (never 0), and
  likewise when a subject that something promises (a header's count, the platform's, the matrix's own
  shape) is dropped or listed twice: none of these passes;
- be judged exactly like the original (the same verdict lines, the same exit) when the mutation is
  neutral, or else be refused or failed: a moved subject, junk on a line of its own;
- never pass where the original did not.

Subjects nothing promises (a PCI device in lspci, an environment variable, a testcase of nvbandwidth) may
be dropped without a failure: nothing here can know they existed. The last test asserts how many cases
ran and prints them by probe and outcome.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercheck.cli import main
from evidence import TOOLS

COUNTS: Counter[str] = Counter()
FUZZ = settings(deadline=None, print_blob=True, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
BAD = ("nan", "inf", "1e400", "-5", "NaN", "-inf")
_ROW = re.compile(r"^\s*(?:\d{1,6}: )?\s*\d+\s+\d+\s")
_LABEL = re.compile(r"^\s*\d{1,6}: ?")


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


# -- what each probe reads: its subjects, and the numbers it judges ---------------------------------------

Span = tuple[int, int]   # lines [start, end) of one subject


def _blocks(lines: list[str], start: Callable[[str], bool], end: Callable[[str], bool] = lambda s: False) -> list[Span]:
    """Consecutive blocks, each from a line `start` takes up to the next such line (or an `end` line)."""
    found: list[Span] = []
    opened: int | None = None
    for i, line in enumerate(lines):
        if i < 2:
            continue
        if start(line) or (opened is not None and end(line)):
            if opened is not None:
                found.append((opened, i))
            opened = i if start(line) else None
    if opened is not None:
        found.append((opened, len(lines)))
    return found


def _single(lines: list[str], match: Callable[[str], bool]) -> list[Span]:
    return [(i, i + 1) for i, line in enumerate(lines) if i >= 2 and match(line)]


def _tokens(lines: list[str], pick: Callable[[int, str], list[tuple[int, int]]]) -> list[tuple[int, int, int]]:
    """(line, start, end) of every judged number `pick` finds in each line."""
    return [(i, a, b) for i, line in enumerate(lines) if i >= 2 for a, b in pick(i, line)]


def _numbers_after(pattern: str) -> Callable[[int, str], list[tuple[int, int]]]:
    rx = re.compile(pattern)
    return lambda i, line: [m.span("n") for m in rx.finditer(line)]


def nccl_subjects(lines: list[str]) -> dict[str, list[Span]]:
    return {"rank": _single(lines, lambda s: bool(re.search(r"#\s*Rank\s+\d", s))),
            "row": _single(lines, lambda s: bool(_ROW.match(s)) and len(s.split()) >= 8)}


def nccl_numbers(lines: list[str]) -> list[tuple[int, int, int]]:
    def pick(i: int, line: str) -> list[tuple[int, int]]:
        if not (_ROW.match(line) and len(line.split()) >= 8):
            return []
        spans = [m.span() for m in re.finditer(r"\S+", line)]
        measured = spans[-8:] if len(spans) >= 12 else spans[-4:]
        return [(a, b) for a, b in measured if re.fullmatch(r"[\d.e+-]+", line[a:b])]
    return _tokens(lines, pick)


def nvb_matrix_rows(lines: list[str]) -> list[Span]:
    rows, inside = [], False
    for i, line in enumerate(lines):
        s = line.strip()
        if s.endswith(("(GB/s)", "(ns)")):
            inside = False
            continue
        if inside and re.match(r"^\s*\d+\s+\S", line):
            rows.append((i, i + 1))
        elif inside and not s:
            inside = False
        if re.match(r"^\s+0(\s+\d+)*\s*$", line):  # the column labels under a title
            inside = True
    return rows


def nvb_numbers(lines: list[str]) -> list[tuple[int, int, int]]:
    cells = {i for i, _ in nvb_matrix_rows(lines)}

    def pick(i: int, line: str) -> list[tuple[int, int]]:
        if i in cells:
            return [m.span() for m in re.finditer(r"\d+\.\d+", line)]
        m = re.match(r"^SUM \S+ (?P<n>\S+)", line)
        return [m.span("n")] if m else []
    return _tokens(lines, pick)


def nvsmi_sections(lines: list[str]) -> dict[str, list[Span]]:
    return {"gpu": _blocks(lines, lambda s: bool(re.match(r"^GPU [0-9A-Fa-f]{4,8}:", s)))}


_COUNTER = r"(?:Correctable|Uncorrectable|Single Bit ECC|Double Bit ECC)[^:\n]*:\s*(?P<n>\d+)\s*$"


@dataclass(frozen=True)
class Case:
    probe: str
    path: Path
    subjects: Callable[[list[str]], dict[str, list[Span]]]
    promised: frozenset[str]              # subject kinds something in the input or the platform counts
    numbers: Callable[[list[str]], list[tuple[int, int, int]]] | None = None
    bad: tuple[str, ...] = BAD
    expect: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.probe}:{self.path.stem}"


def _nccl_expect(path: Path) -> tuple[str, ...]:
    hosts = Counter(re.search(r"on\s+(\S+)\s+device", l).group(1) for l in lines_of(path)  # type: ignore[union-attr]
                    if re.search(r"#\s*Rank\s+\d+.*on\s+\S+\s+device", l))
    return ("--expect", f"gpu_count={next(iter(hosts.values()))}") if len(set(hosts.values())) == 1 else ()


def _nccl_promised(path: Path) -> frozenset[str]:
    from clustercheck.toolout import nccl_tests

    run = nccl_tests.parse(path.read_text())
    rows = run.sizes_promised() is not None and not any("elision" in n for n in run.notes) and not run.failure
    return frozenset({"rank"} if run.ranks else set()) | frozenset({"row"} if rows else set())


def _nvlink_expect(path: Path) -> tuple[str, ...]:
    from clustercheck.probes import nvlink

    report = nvlink.parse(path.read_text())
    out: tuple[str, ...] = ()
    if sorted(g.index for g in report.gpus) == list(range(len(report.gpus))):
        out += ("--expect", f"gpu_count={len(report.gpus)}")
    return out + ("--expect", f"nvlinks_per_gpu={max(g.active for g in report.gpus)}")


def _topo_expect(path: Path) -> tuple[str, ...]:
    gpus = {l.split()[0] for l in lines_of(path)[2:] if re.match(r"^GPU\d+\s", l)}
    return ("--expect", f"gpu_count={len(gpus)}")


def cases() -> list[Case]:
    out: list[Case] = []
    for path in sorted((TOOLS / "nccl-tests").glob("*.txt")):
        out.append(Case("nccl-tests", path, nccl_subjects, _nccl_promised(path), nccl_numbers,
                        expect=_nccl_expect(path)))
    for folder in ("nvbandwidth", "nvbandwidth-crashed"):
        for path in sorted((TOOLS / folder).glob("*.txt")):
            out.append(Case("nvbandwidth", path, lambda ls: {"row": nvb_matrix_rows(ls)}, frozenset({"row"}),
                            nvb_numbers))
    for path in sorted((TOOLS / "nvlink-status").glob("*.txt")):
        out.append(Case("nvlink", path, lambda ls: {
            "gpu": _blocks(ls, lambda s: bool(re.match(r"^\s*GPU \d+: ", s))),
            "link": _single(ls, lambda s: bool(re.match(r"^\s*Link \d+: ", s)))},
            frozenset({"gpu", "link"}), lambda ls: _tokens(ls, _numbers_after(r"Link \d+: (?P<n>[\d.]+) GB/s")),
            expect=_nvlink_expect(path)))
    for path in sorted((TOOLS / "nvidia-smi-q").glob("*.txt")):
        for probe, numbers, bad in (
                ("ecc", lambda ls: _tokens(ls, _numbers_after(_COUNTER)), BAD + ("-1", "2.5")),
                ("throttle", lambda ls: _tokens(ls, _numbers_after(r"GPU Current Temp\s*:\s*(?P<n>\d+) C")),
                 ("nan", "1e400", "-300", "inf", "500")),
                ("versions", None, BAD), ("fabric", None, BAD), ("pcie-link", None, BAD)):
            out.append(Case(probe, path, nvsmi_sections, frozenset({"gpu"}), numbers, bad))
    for path in sorted((TOOLS / "nvidia-smi-topo").glob("*.txt")):
        for probe in ("topo", "numa"):
            out.append(Case(probe, path, lambda ls: {"row": _single(ls, lambda s: bool(
                re.match(r"^(GPU|NIC|mlx5_)\d+\s", s)))}, frozenset({"row"}), expect=_topo_expect(path)
                if probe == "topo" else ()))
    for folder in ("ibstat", "ibv_devinfo"):
        for path in sorted((TOOLS / folder).glob("*.txt")):
            out.append(Case("ib", path, lambda ls: {"port": _blocks(ls, lambda s: bool(
                re.match(r"^\s+Port \d+:\s*$|^\s+port:\s+\d+\s*$", s)), lambda s: s.startswith(("CA '", "hca_id")))},
                frozenset({"port"}), lambda ls: _tokens(ls, _numbers_after(r"^\s+Rate: (?P<n>\S+)\s*$"))))
    for path in sorted((TOOLS / "lspci-acs").glob("*.txt")):
        out.append(Case("pci-acs", path, lambda ls: {"device": _blocks(ls, lambda s: bool(re.match(
            r"^(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.\d ", s)))}, frozenset()))
        out.append(Case("pcie-link", path, lambda ls: {"device": _blocks(ls, lambda s: bool(re.match(
            r"^(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.\d ", s)))}, frozenset()))
    for path in sorted((TOOLS / "gdscheck").glob("*.txt")):
        out.append(Case("gds", path, lambda ls: {"transport": _single(ls, lambda s: bool(re.match(
            r"^\s*(?:NVMe|NVMeOF|SCSI|NFS|WekaFS|BeeGFS) +:", s)))}, frozenset(),
            lambda ls: _tokens(ls, _numbers_after(r"\berr=(?P<n>\d+)"))))
    for path in sorted((TOOLS.parent / "nccl-debug").glob("rccl-*.txt")):  # RCCL's own word on the host settings
        out.append(Case("amd-host", path, lambda ls: {}, frozenset()))
    for path in sorted((TOOLS / "amd-smi").glob("*.txt")) + sorted((TOOLS / "rocm-smi").glob("*.txt")):
        probe = "topo" if "topo" in path.stem else "amd-smi"
        out.append(Case(probe, path, lambda ls: {}, frozenset(), lambda ls: _tokens(
            ls, _numbers_after(r"(?:UNCORRECTABLE|DEFERRED)\w*:\s*(?P<n>\d+)\s*$"))))
    for path in sorted((TOOLS / "ib_write_bw").glob("*.txt")):
        out.append(Case("ib-write-bw", path, lambda ls: {"row": _single(ls, lambda s: bool(re.match(
            r"^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s*$", s)))}, frozenset(), lambda ls: _tokens(
            ls, _numbers_after(r"^\s*\d+\s+\d+\s+[\d.]+\s+(?P<n>[\d.]+)\s+[\d.]+\s*$")),
            expect=("--expect", "ib_write_bw_min=1")))
    for path in sorted((TOOLS / "gdsio").glob("*.txt")):
        out.append(Case("gdsio", path, lambda ls: {"result": _single(ls, lambda s: "IoType:" in s)}, frozenset(),
                        lambda ls: _tokens(ls, _numbers_after(r"Throughput: (?P<n>\S+) GiB/sec")),
                        expect=("--expect", "gdsio_read_min=1", "--expect", "gdsio_write_min=1")))
    for path in sorted((TOOLS.parent / "nccl-debug").glob("*.txt")):  # NCCL_DEBUG=INFO logs: nothing counted
        out.append(Case("nccl-log", path, lambda ls: {}, frozenset()))
    return out


CASES = cases()


# -- running one case -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    code: int
    lines: tuple[str, ...]     # verdict lines (PASS/FAIL/NOT JUDGED ...), without the summary line
    seconds: float             # CPU seconds of the probe call


def run(tmp_path: Path, case: Case, body: bytes) -> Result:
    path = tmp_path / "capture.txt"
    path.write_bytes(body)
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    # CPU time of this thread, not wall time: linearity is a property of the parser, and an xdist worker
    # sharing its cores with other workers and their ranks can wait seconds for a core it does not use
    t0 = time.thread_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["probe", case.probe, "--input", str(path), *case.expect])
    seconds = time.thread_time() - t0
    text = out.getvalue()
    assert code in (0, 1, 3, 4, 5), (code, text, err.getvalue())  # 3: judged in part, the rest not
    if code == 4:
        message = err.getvalue().strip()
        assert message.startswith("clustercheck: error: ") and len(message.splitlines()) == 1, message
    # line numbers shift when a line is put in or taken out: a verdict is the same wherever its line now is
    verdicts = tuple(sorted(re.sub(r"\bline \d+", "line N", l) for l in text.splitlines()
                            if l.startswith(("PASS ", "FAIL ", "NOT JUDGED "))))
    return Result(code, verdicts, seconds)


_ORIGINAL: dict[str, Result] = {}


def original(tmp_path: Path, case: Case) -> Result:
    if case.id not in _ORIGINAL:
        _ORIGINAL[case.id] = run(tmp_path, case, case.path.read_bytes())
    return _ORIGINAL[case.id]


def in_time(result: Result, size: int, what: str = "") -> None:
    """Linear time: a generous constant per MiB of CPU, never seconds for a capture."""
    assert result.seconds < 1.0 + 2.0 * size / (1 << 20), f"{what}: {result.seconds:.2f} s for {size} bytes"


def joined(lines: list[str]) -> bytes:
    return "\n".join(lines).encode("utf-8")


def tally(case: Case, how: str, result: Result) -> None:
    COUNTS[f"{case.probe} {how} exit {result.code}"] += 1
    COUNTS["cases"] += 1


# -- the properties ---------------------------------------------------------------------------------

def _with_subjects(case: Case) -> bool:
    return any(case.subjects(lines_of(case.path)).values())


@FUZZ
@given(data=st.data(), case=st.sampled_from([c for c in CASES if _with_subjects(c)]),
       how=st.sampled_from(["drop", "duplicate", "reorder"]))
def test_a_subject_dropped_duplicated_or_moved(tmp_path_factory, data, case, how):
    tmp = tmp_path_factory.mktemp("subject")
    lines = lines_of(case.path)
    kinds = {k: v for k, v in case.subjects(lines).items() if v and (how != "reorder" or len(v) > 1)}
    if not kinds:
        return
    kind = data.draw(st.sampled_from(sorted(kinds)))
    spans = kinds[kind]
    k = data.draw(st.integers(0, len(spans) - 1 - (how == "reorder")))
    (a, b) = spans[k]
    if how == "drop":
        mutated = lines[:a] + lines[b:]
    elif how == "duplicate":
        mutated = lines[:b] + lines[a:b] + lines[b:]
    else:
        (c, d) = spans[k + 1]
        if c != b:  # not adjacent: swap only adjacent subjects, so no line in between moves
            return
        mutated = lines[:a] + lines[c:d] + lines[a:b] + lines[d:]
    before, after = original(tmp, case), run(tmp, case, joined(mutated))
    in_time(after, sum(map(len, mutated)), f"{case.id} {how}")
    tally(case, how, after)
    if after.code == 0 and (how != "drop" or kind in case.promised):  # dropping what nothing promised can pass
        assert before.code == 0, f"{case.id}: a {how} of a {kind} passed a capture that did not"
    if how in ("drop", "duplicate") and kind in case.promised:
        assert after.code != 0, f"{case.id}: {how} of {kind} {k} (lines {a + 1}-{b}) passed:\n" + "\n".join(after.lines)
    if how == "reorder" and after.code not in (1, 4):
        assert (after.code, after.lines) == (before.code, before.lines), f"{case.id}: a moved {kind} changed a verdict"


@FUZZ
@given(data=st.data(), case=st.sampled_from([c for c in CASES if c.numbers and c.numbers(lines_of(c.path))]))
def test_a_judged_number_that_is_no_number_never_passes(tmp_path_factory, data, case):
    tmp = tmp_path_factory.mktemp("number")
    lines = lines_of(case.path)
    assert case.numbers is not None
    spots = case.numbers(lines)
    i, a, b = data.draw(st.sampled_from(spots))
    value = data.draw(st.sampled_from(case.bad))
    mutated = list(lines)
    mutated[i] = lines[i][:a] + value + lines[i][b:]
    after = run(tmp, case, joined(mutated))
    in_time(after, sum(map(len, mutated)), f"{case.id} number")
    tally(case, "number", after)
    assert after.code in (1, 3, 4), (f"{case.id}: line {i + 1} {lines[i][a:b]!r} -> {value!r} exited {after.code}:\n"
                                  + "\n".join(after.lines))


@FUZZ
@given(data=st.data(), case=st.sampled_from(CASES), how=st.sampled_from(["truncate", "long line", "binary"]))
def test_a_capture_cut_short_or_with_junk_in_it(tmp_path_factory, data, case, how):
    tmp = tmp_path_factory.mktemp("junk")
    raw = case.path.read_bytes()
    lines = raw.split(b"\n")
    at = data.draw(st.integers(2, len(lines)))
    if how == "truncate":
        body = b"\n".join(lines[:at])
    elif how == "long line":
        unit = data.draw(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=8))
        body = b"\n".join(lines[:at] + [(unit * ((64 << 10) // len(unit) + 1)).encode("utf-8")] + lines[at:])
    else:
        junk = data.draw(st.binary(min_size=1, max_size=64))
        body = b"\n".join(lines[:at] + [junk] + lines[at:])
    before, after = original(tmp, case), run(tmp, case, body)
    head = body.split(b"\n")[at][:16] if at < len(body.split(b"\n")) else b""
    in_time(after, len(body), f"{case.id} {how} at line {at + 1}: {head!r}")
    tally(case, how, after)
    if b"\0" in body:
        assert after.code == 4, f"{case.id}: NUL bytes were read as text"
    whole = set(case.subjects(lines_of(case.path))) <= case.promised   # every subject it has is counted
    if after.code == 0 and (how != "truncate" or whole):
        assert before.code == 0, f"{case.id}: {how} at line {at + 1} passed a capture that did not"
    if how != "truncate" and after.code == 0:  # junk on a line of its own changes nothing it judges
        assert after.lines == before.lines, f"{case.id}: {how} at line {at + 1} changed a passing verdict"


def test_every_probe_with_a_parser_is_fuzzed_on_real_captures():
    from clustercheck import probes

    fuzzed = {c.probe for c in CASES}
    live_only = {"env"}  # `env` output holds no public capture in tests/fixtures (tests/test_probes_env.py)
    assert fuzzed | live_only == set(probes.NAMES), set(probes.NAMES) - fuzzed - live_only


def test_fuzz_case_count():
    """Runs last in this module (pytest keeps file order): the cases above, by probe and outcome."""
    if COUNTS["cases"] == 0:
        pytest.skip("the fuzz tests did not run in this process (-k, or another xdist worker)")
    print("\n" + "\n".join(f"{n:6d}  {k}" for k, n in sorted(COUNTS.items())))
    assert COUNTS["cases"] >= 600, COUNTS["cases"]
