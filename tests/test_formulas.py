"""clustercheck.formulas: nccl-tests busbw factors and algbw/busbw from the mean time across ranks,
checked by hand and against the size/time/algbw/busbw columns of real all_reduce_perf output."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from clustercheck import formulas

# -- busbw factors ---------------------------------------------------------------------------

@pytest.mark.parametrize("collective, n, factor", [
    ("all_reduce", 2, 1.0),
    ("all_reduce", 4, 1.5),
    ("all_reduce", 8, 1.75),
    ("all_reduce", 16, 1.875),
    ("all_reduce", 1, 0.0),
    ("all_gather", 2, 0.5),
    ("all_gather", 8, 0.875),
    ("reduce_scatter", 8, 0.875),
    ("reduce_scatter", 4, 0.75),
    ("alltoall", 8, 0.875),
    ("alltoall", 16, 0.9375),
    ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0),
    ("sendrecv", 2, 1.0),
    ("sendrecv", 8, 1.0),
])
def test_busbw_factor_matches_nccl_tests(collective, n, factor):
    assert formulas.busbw_factor(collective, n) == factor


@pytest.mark.parametrize("n", [3, 5, 7, 24, 1000])
def test_all_reduce_factor_is_two_n_minus_one_over_n(n):
    assert formulas.busbw_factor("all_reduce", n) == pytest.approx(2 * (n - 1) / n, rel=1e-15)
    assert formulas.busbw_factor("all_gather", n) == pytest.approx((n - 1) / n, rel=1e-15)


def test_unknown_collective_has_no_factor():
    with pytest.raises(ValueError, match="all_reduse"):
        formulas.busbw_factor("all_reduse", 8)


# -- algbw and the mean time -------------------------------------------------------------------

def test_algbw_is_decimal_gigabytes_per_second():
    assert formulas.algbw_gbs(1_000_000_000, 1.0) == 1.0
    assert formulas.algbw_gbs(1 << 30, 0.5) == pytest.approx(2 * 1.073741824, rel=1e-15)


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_algbw_without_positive_time_is_nan(seconds):
    assert math.isnan(formulas.algbw_gbs(1024, seconds))


def test_mean_time_is_the_arithmetic_mean():
    assert formulas.mean_time([1.0, 2.0, 6.0]) == 3.0


def test_bandwidths_use_the_mean_time_not_the_mean_bandwidth():
    # 4 MB in 1 ms (4 GB/s) and in 3 ms (1.33 GB/s): mean time 2 ms -> 2 GB/s, while the mean of the
    # per-rank bandwidths would be 2.67 GB/s.
    t, alg, bus = formulas.bandwidths("all_reduce", 4_000_000, [1e-3, 3e-3])
    assert t == pytest.approx(2e-3, rel=1e-15)
    assert alg == pytest.approx(2.0, rel=1e-12)
    assert bus == pytest.approx(2.0 * 1.0, rel=1e-12)
    mean_of_bandwidths = (4.0 + 4.0 / 3) / 2
    assert alg != pytest.approx(mean_of_bandwidths, rel=1e-3)


def test_bandwidths_take_the_rank_count_from_the_times():
    times = [1e-3, 1e-3, 2e-3, 2e-3, 1e-3, 1e-3, 1e-3, 3e-3]  # mean 1.5 ms
    t, alg, bus = formulas.bandwidths("all_reduce", 3_000_000, times)
    assert t == pytest.approx(1.5e-3, rel=1e-15)
    assert alg == pytest.approx(2.0, rel=1e-12)
    assert bus == pytest.approx(2.0 * 1.75, rel=1e-12)


def test_bandwidths_for_all_gather_use_its_factor():
    _, alg, bus = formulas.bandwidths("all_gather", 1_000_000, [1e-3] * 4)
    assert (alg, bus) == (pytest.approx(1.0), pytest.approx(0.75))


# -- real nccl-tests all_reduce_perf output -------------------------------------------------------
# A small parser of our own (the product will get its own later). Each fixture file starts with a
# two-line source note. Data rows: size count type redop [root] then, out-of-place and in-place,
# time(us) algbw busbw #wrong|error. `root` and `#wrong` are the newer format; old output has no root
# and an `error` column instead.

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tool-outputs" / "nccl-tests"
ALLREDUCE_FILES = sorted(FIXTURES.glob("allreduce-*.txt"))
_RANK_LINE = re.compile(r"^#\s+Rank\s+\d+\s")


@dataclass(frozen=True)
class Half:
    """One of the out-of-place / in-place column groups, with the printed time kept as text."""

    time_text: str
    algbw: float
    busbw: float

    @property
    def time_us(self) -> float:
        return float(self.time_text)

    @property
    def time_half_unit(self) -> float:
        """Half a unit in the last printed digit of the time (how far rounding may have moved it)."""
        decimals = len(self.time_text.split(".")[1]) if "." in self.time_text else 0
        return 0.5 * 10.0 ** -decimals


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    dtype: str
    halves: tuple[Half, Half]


def parse_nccl_tests(text: str) -> tuple[list[Row], int]:
    """(data rows, number of `#  Rank` lines) of one all_reduce_perf output."""
    # `srun --label` puts "N: " before every line: the row is what follows it
    lines = [re.sub(r"^\s{0,8}\d{1,6}: ?", "", line) for line in text.splitlines()[2:]]
    ranks = sum(1 for line in lines if _RANK_LINE.match(line))
    rows = []
    for line in lines:
        tokens = line.split()
        if not tokens or line.lstrip().startswith("#") or "NCCL INFO" in line or not tokens[0].isdigit():
            continue
        if len(tokens) == 13:      # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
            first = 5
        elif len(tokens) == 12:    # size count type redop | time algbw busbw error | time algbw busbw error
            first = 4
        else:
            raise AssertionError(f"a data row with {len(tokens)} columns: {line!r}")
        out, inplace = tokens[first:first + 4], tokens[first + 4:first + 8]
        rows.append(Row(int(tokens[0]), int(tokens[1]), tokens[2],
                        (Half(out[0], float(out[1]), float(out[2])),
                         Half(inplace[0], float(inplace[1]), float(inplace[2])))))
    return rows, ranks


def _fits(half: Half, n: int) -> bool:
    """Printed busbw agrees with printed algbw x 2(n-1)/n within the two 2-decimal roundings."""
    f = formulas.busbw_factor("all_reduce", n)
    return abs(half.busbw - half.algbw * f) <= 0.005 * (1 + f) + 1e-9


def infer_ranks(rows: list[Row]) -> int:
    """n from busbw/algbw = 2(n-1)/n: the one integer that fits every row with a readable algbw."""
    halves = [h for r in rows for h in r.halves if h.algbw >= 1.0]
    assert halves, "no row with algbw >= 1 GB/s to infer the rank count from"
    fitting = [n for n in range(2, 4097) if all(_fits(h, n) for h in halves)]
    best = max(halves, key=lambda h: h.algbw)
    estimate = 2 / (2 - best.busbw / best.algbw)
    assert len(fitting) == 1, f"rank counts consistent with every row: {fitting} (best row says {estimate:.2f})"
    return fitting[0]


def test_the_fixture_files_are_there():
    assert len(ALLREDUCE_FILES) >= 5


def test_parser_reads_both_formats():
    new = ("note\n\n#  Rank  0 Group  0 Pid 1 on a device 0\n#  Rank  1 Group  0 Pid 2 on a device 1\n"
           "        1024           256     float     sum      -1    147.1    0.01    0.01      0    123.1    0.01    0.02      0\n")
    old = ("note\n\nhost:1:1 [0] NCCL INFO Launch mode Parallel\n# comment 1 2 3\n"
           "     1048576        262144   float     sum    135.3    7.75   15.02  7e-07    132.7    7.90   15.31  7e-07\n")
    (new_rows, new_ranks), (old_rows, old_ranks) = parse_nccl_tests(new), parse_nccl_tests(old)
    assert new_ranks == 2 and old_ranks == 0
    assert new_rows == [Row(1024, 256, "float", (Half("147.1", 0.01, 0.01), Half("123.1", 0.01, 0.02)))]
    assert old_rows == [Row(1048576, 262144, "float", (Half("135.3", 7.75, 15.02), Half("132.7", 7.90, 15.31)))]


def test_rank_inference_refuses_inconsistent_rows():
    rows = [Row(1, 1, "float", (Half("1.0", 10.0, 17.50), Half("1.0", 10.0, 18.75)))]  # n = 8 and n = 16
    with pytest.raises(AssertionError):
        infer_ranks(rows)


@pytest.mark.parametrize("path", ALLREDUCE_FILES, ids=[p.stem for p in ALLREDUCE_FILES])
def test_algbw_and_busbw_recomputed_from_size_and_time(path):
    rows, rank_lines = parse_nccl_tests(path.read_text(encoding="utf-8"))
    assert rows, f"no data rows in {path.name}"
    n = rank_lines or infer_ranks(rows)
    checked = 0
    for row in rows:
        row_checked = False
        for half in row.halves:
            if half.algbw < 0.01:  # printed as 0.00: nothing to compare with
                continue
            t, alg, bus = formulas.bandwidths("all_reduce", row.size, [half.time_us * 1e-6] * n)
            # The printed time is rounded to its last digit, the printed bandwidths to 2 decimals; with
            # 4-5 significant digits in the time this is agreement to about 3 significant digits.
            rel_time = half.time_half_unit / (half.time_us - half.time_half_unit)
            where = f"{path.name}: size {row.size}, time {half.time_text}"
            assert alg == pytest.approx(half.algbw, abs=0.005 + alg * rel_time + 1e-9), where
            assert bus == pytest.approx(half.busbw, abs=0.005 + bus * rel_time + 1e-9), where
            row_checked = True
        checked += row_checked
    assert checked >= min(10, len(rows)), f"only {checked} of {len(rows)} rows were comparable"


WITH_RANK_LINES = [p for p in ALLREDUCE_FILES if parse_nccl_tests(p.read_text(encoding="utf-8"))[1]]


@pytest.mark.parametrize("path", WITH_RANK_LINES, ids=[p.stem for p in WITH_RANK_LINES])
def test_counted_ranks_agree_with_the_busbw_ratio(path):
    rows, rank_lines = parse_nccl_tests(path.read_text(encoding="utf-8"))
    assert infer_ranks(rows) == rank_lines
