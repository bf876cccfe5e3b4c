"""Fuzzing the command line (hypothesis) through `clustercheck.cli.main`, the function the `clustercheck`
command runs: argument vectors, run records (`report`, `compare`) and probe inputs (`probe NAME --input`).

Every case must end with an exit code from the table (clustercheck.exitcodes) and no exception escaping
`main` (a traceback for the user); a refusal (4) is one stderr line, and `report` refused leaves the
previous reports byte-identical. The one boundary replaced: `pytest.main` under `run` (a valid argument
vector would otherwise measure; the suites and profiles themselves are fuzzed in test_fuzz_inputs.py, and
bad ones through the real command there). The last test asserts the number of generated cases.
"""

from __future__ import annotations

import codecs
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clustercheck import probes
from clustercheck.probes import cli as probe_cli
from clustercheck.cli import main
from clustercheck.exitcodes import Exit
from evidence import TOOLS
from helpers import clustercheck_here

pytestmark = pytest.mark.pool  # starts real rank pools or whole runs: `pytest -m 'not pool'` leaves it out

REPO = Path(__file__).resolve().parent.parent
CODES = {int(c) for c in Exit}
COUNTS: Counter[str] = Counter()
FUZZ = settings(deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
CAPTURES = sorted(TOOLS.glob("*/*.txt"))


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv) as the command runs it: argparse's own exits (usage, --help, --version) included."""
    try:
        code = int(main(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else int(Exit.BAD_INPUT))
    out = capsys.readouterr()
    assert code in CODES, (argv, code, out.err)
    assert "Traceback" not in out.err, out.err
    if code == Exit.BAD_INPUT and out.err.strip().startswith("clustercheck: error:"):
        assert len(out.err.strip().splitlines()) == 1, out.err  # our refusals are one line
    return code, out.out, out.err


# -- a real run record, the base of the record mutations -------------------------------------------

SUITE = """checks:
  - id: ok
    measure: all_reduce
    params: {sizes: [1KiB, 4KiB], iters: 2, warmup: 1}
  - id: h2d
    measure: host_device
"""
PROFILE = """platform: cpu
description: fuzz base
detect:
  gpu_count: 0
checks:
  ok:
    busbw: {limit: ">= 0.000001", unit: GB/s, source: "any working loopback"}
"""


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real run (gloo, 2 ranks): its run.jsonl and its reports, as `clustercheck run` wrote them."""
    base = tmp_path_factory.mktemp("fuzz-record")
    (base / "th").mkdir()
    (base / "th" / "cpu.yaml").write_text(PROFILE)
    (base / "s.yaml").write_text(SUITE)
    proc = clustercheck_here("run", "s.yaml", "--thresholds", "th", "--out", "out", cwd=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return (base / "out" / "latest").resolve()


JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats(allow_nan=True)
                    | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)


@st.composite
def record_text(draw: st.DrawFn, lines: list[dict[str, Any]]) -> bytes:
    """A run record broken one of the ways a disk, a kill or a hand does: truncated, binary, empty, a
    field of the wrong type, a key or a line missing or repeated, a line that is not JSON."""
    op = draw(st.sampled_from(["truncate", "binary", "empty", "wrong_type", "drop_key", "drop_line",
                               "duplicate_line", "garbage_line", "deep"]))
    entries = json.loads(json.dumps(lines))  # a deep copy
    if op == "binary":
        return draw(st.binary(max_size=400))
    if op == "empty":
        return draw(st.sampled_from([b"", b"\n", b"\n\n   \n"]))
    i = draw(st.integers(0, len(entries) - 1))
    if op == "wrong_type" and entries[i]:
        key = draw(st.sampled_from(sorted(entries[i])))
        entries[i][key] = draw(JSON)
    elif op == "drop_key" and entries[i]:
        del entries[i][draw(st.sampled_from(sorted(entries[i])))]
    elif op == "drop_line":
        del entries[i]
    elif op == "duplicate_line":
        entries.insert(i, entries[i])
    text = "".join(json.dumps(e) + "\n" for e in entries).encode()
    if op == "deep":  # nesting deeper than Python's recursion limit, written as text (json.dumps cannot)
        depth = draw(st.integers(50, 5000))
        deep = b'{"type": "result", "rows": ' + b"[" * depth + b"0" + b"]" * depth + b"}\n"
        cut = [m for m in range(len(text)) if text[m:m + 1] == b"\n"]
        at = cut[i % len(cut)] + 1 if cut else 0
        text = text[:at] + deep + text[at:]
    if op == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    if op == "garbage_line":
        parts = text.split(b"\n")
        parts.insert(draw(st.integers(0, len(parts))), draw(st.binary(min_size=1, max_size=40)))
        text = b"\n".join(parts)
    return text


def test_records_report_and_compare(real_run: Path, capsys: pytest.CaptureFixture[str],
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    lines = [json.loads(line) for line in (real_run / "run.jsonl").read_text().splitlines()]
    assert {e["type"] for e in lines} >= {"run", "plan", "result", "exclude", "end"}
    work = tmp_path_factory.mktemp("fuzz-reports")
    code, _, _ = run_main(["report", str(real_run)], capsys)
    assert code == Exit.NOTHING or code == Exit.PASSED  # h2d skips on CPU, ok passes: the run's verdict
    reports = {p.name: p.read_bytes() for p in real_run.iterdir() if p.suffix in (".html", ".xml", ".json")}

    @settings(FUZZ, max_examples=400)
    @given(data=record_text(lines))
    def case(data: bytes) -> None:
        run = work / "run"
        run.mkdir(exist_ok=True)
        for name, body in reports.items():
            (run / name).write_bytes(body)
        (run / "run.jsonl").write_bytes(data)
        code, _, _ = run_main(["report", str(run)], capsys)
        if code == Exit.BAD_INPUT:  # refused: the reports are the previous ones, byte for byte
            assert {n: (run / n).read_bytes() for n in reports} == reports
        code, _, _ = run_main(["compare", str(run / "run.jsonl"), str(real_run / "run.jsonl")], capsys)
        COUNTS["records"] += 1

    case()


# -- probe inputs ------------------------------------------------------------------------------------

@st.composite
def probe_input(draw: st.DrawFn) -> bytes:
    """A real capture of some tool, then mangled: bytes flipped, lines cut or repeated, re-encoded as
    UTF-16 (PowerShell) or with a BOM, NULs; or plain random bytes."""
    op = draw(st.sampled_from(["as_is", "flip", "cut", "repeat", "utf16", "bom", "nul", "random", "truncate"]))
    if op == "random":
        return draw(st.binary(max_size=2000))
    text = draw(st.sampled_from(CAPTURES)).read_bytes()
    rnd = random.Random(draw(st.integers(0, 2**32)))
    lines = text.split(b"\n")
    if op == "flip":
        data = bytearray(text)
        for _ in range(draw(st.integers(1, 20))):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
        return bytes(data)
    if op == "cut":
        del lines[rnd.randrange(len(lines))]
    elif op == "repeat":
        k = rnd.randrange(len(lines))
        lines[k:k] = [lines[k]] * draw(st.integers(1, 50))
    elif op == "utf16":
        return codecs.BOM_UTF16_LE + text.decode("utf-8", "replace").encode("utf-16-le")
    elif op == "bom":
        return codecs.BOM_UTF8 + text
    elif op == "nul":
        lines.insert(rnd.randrange(len(lines) + 1), b"\0" * draw(st.integers(1, 8)))
    elif op == "truncate":
        return text[:draw(st.integers(0, len(text)))]
    return b"\n".join(lines)


def test_probe_inputs(capsys: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory) -> None:
    work = tmp_path_factory.mktemp("fuzz-probe")

    @settings(FUZZ, max_examples=800)
    @given(name=st.sampled_from(probes.NAMES), data=probe_input())
    def case(name: str, data: bytes) -> None:
        path = work / "capture.txt"
        path.write_bytes(data)
        code, _, _ = run_main(["probe", name, "--input", str(path)], capsys)
        assert code != Exit.INCOMPLETE  # judging a file has no run to leave unfinished
        COUNTS["probe inputs"] += 1

    case()


def test_a_huge_probe_input_is_refused_without_reading_it_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as fh:
        fh.truncate(probe_cli.MAX_INPUT * 4)  # sparse: 256 MiB of NULs that cost no disk
    code, _, err = run_main(["probe", "topo", "--input", str(huge)], capsys)
    assert code == Exit.BAD_INPUT and "larger than 64 MiB" in err


# -- argument vectors ----------------------------------------------------------------------------------

WORDS = ["run", "report", "compare", "probe", "platforms", "show", "list", "all", "topo", "nvlink", "cpu",
         "cpu-smoke", "h100-sxm-8x", "--platform", "--thresholds", "--out", "--ranks", "--backend", "--launcher",
         "--hosts", "--timeout", "--tolerance", "--compare", "--input", "--expect", "--list", "--all", "--dry-run",
         "-k", "-m", "-p", "-x", "-v", "--help", "--version", "--pair-seed", "--repeat", "nvlinks_per_gpu=x",
         "0", "-1", "1e999", "nan", "5%", "", " ", "-", "--", "/dev/null", "/proc/self/status", "/", "/etc/passwd",
         "\x1b[2J", "é", "a" * 300, "s.yaml", "../x", "--out=/proc/nope", "--ranks=0", "slurm", "hosts", "auto"]


def test_argument_vectors(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                          tmp_path_factory: pytest.TempPathFactory) -> None:
    import pytest as pytest_module

    work = tmp_path_factory.mktemp("fuzz-argv")
    monkeypatch.chdir(work)
    started: list[list[str]] = []
    monkeypatch.setattr(pytest_module, "main", lambda args, plugins=None: started.append(list(args)) or 0)
    monkeypatch.setenv("SLURM_CONF", str(work / "no-slurm.conf"))  # resume must never reach a real cluster

    @settings(FUZZ, max_examples=600)
    @given(argv=st.lists(st.sampled_from(WORDS) | st.text(max_size=12), max_size=7))
    def case(argv: list[str]) -> None:
        if argv and argv[0] == "probe" and not ({"--input", "--list"} & set(argv)):
            argv = [*argv, "--list"]  # live probes read this machine: judged elsewhere, not thousands of times
        if argv and argv[0] == "resume":
            argv = [*argv, "--dry-run"]
        run_main(argv, capsys)
        COUNTS["argv"] += 1

    case()
    assert started  # some vectors were valid runs and reached pytest


def test_fuzz_case_count() -> None:
    """Runs last in this module (pytest keeps file order): at least 1,500 generated cases here, which
    with test_fuzz_inputs.py's 2,350 loader cases makes well over 2,000 per CI run."""
    total = COUNTS["records"] + COUNTS["probe inputs"] + COUNTS["argv"]
    print(f"fuzzed through the CLI: {total} (records {COUNTS['records']}, probe inputs {COUNTS['probe inputs']}, "
          f"argument vectors {COUNTS['argv']})")
    assert total >= 1500, COUNTS
