"""--counters: a window that was never closed or could not be judged never hides behind a skip, and a window
that could not be closed does not lose what its node logged: the next window starts where the last good
one ended (run/runner.py `_close_window`, judging/windows.py `despite`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.counters.allowances import Judgement
from clustercheck.counters.facts import Counter, LogCursor, ReadError, Snapshot
from clustercheck.errors import HarnessError, Skip
from clustercheck.judging.windows import despite
from clustercheck.run.options import Options
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from clustercheck.run.runner import Layout, Runner

LOST = ReadError("kernel.log", "", "/dev/kmsg", "records 12..19 were overwritten in the ring buffer before they "
                 "were read", "lost")


def test_a_skip_beside_a_window_never_closed_is_an_error_saying_both() -> None:
    out = despite("c", Skip("no ib_write_bw on h1"),
                  {"h1": "counters could not be read after the check: rank 0 timed out"}, ["h1"])
    assert isinstance(out, HarnessError) and not isinstance(out, Skip)
    assert str(out) == ("c: skipped (no ib_write_bw on h1), but the counters of its window were not judged: "
                        "h1: counters could not be read after the check: rank 0 timed out")


def test_a_skip_beside_a_window_that_lost_kernel_log_records_is_an_error() -> None:
    out = despite("c", Skip("no ib_write_bw on h1"), {"h1": Judgement("h1", 60.0, (), (LOST,))}, ["h1"])
    assert isinstance(out, HarnessError) and "no ib_write_bw on h1" in str(out)
    assert "h1: kernel.log: /dev/kmsg: records 12..19 were overwritten" in str(out)


def test_a_skip_beside_clean_windows_stays_a_skip() -> None:
    skip = Skip("no ib_write_bw on h1")
    assert despite("c", skip, {"h1": Judgement("h1", 60.0, (), ())}, ["h1"]) is skip


def _snap(host: str, taken: float, uncorrected: int, seq: int) -> dict[str, Any]:
    return Snapshot(host, taken, (Counter("gpu.ecc.uncorrected", "GPU0 (0000:18:00.0)", uncorrected),),
                    cursor=LogCursor("kmsg", seq, seq * 1000)).as_dict()


class _Pool:
    key = PoolKey("gloo", 1)


def test_a_window_that_could_not_be_closed_keeps_the_last_good_snapshot(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """b's closing snapshot fails; the runner used to drop every snapshot, so the next window opened only
    when the next pool started and the kernel log in between was read as history: an Xid there, or an ECC
    error counted in it, was never judged. Now b's window is an error and c's window starts at a's end."""
    runner = Runner(PoolManager(tmp_path / "logs"), Options(None, [], 1, "gloo", tmp_path / "out", counters=True),
                    Layout("gloo", ["h1"], 1))
    monkeypatch.setattr(runner, "_answering", lambda key: _Pool())
    monkeypatch.setattr(runner.pools, "discard", lambda key: None)
    runner.snapshots = {"h1": _snap("h1", 0.0, 0, 10)}  # a's window closed here
    previous: list[dict[str, Any]] = []

    def failing(pool: Any, check: Any = None) -> dict[str, dict[str, Any]]:
        raise HarnessError("rank 0 timed out")

    monkeypatch.setattr(runner, "_snapshot", failing)
    runner._close_window(_Pool.key)  # b's
    assert runner.windows == {"h1": "counters could not be read after the check: rank 0 timed out"}

    def taking(pool: Any, check: Any = None) -> dict[str, dict[str, Any]]:
        previous.append(dict(runner.snapshots))  # the cursor the ranks read the kernel log from
        return {"h1": _snap("h1", 120.0, 1, 30)}

    monkeypatch.setattr(runner, "_snapshot", taking)
    runner._close_window(_Pool.key)  # c's
    assert previous == [{"h1": _snap("h1", 0.0, 0, 10)}]
    window = runner.windows["h1"]
    assert isinstance(window, Judgement), window
    assert [(f.increase.name, f.passed) for f in window.findings] == [("gpu.ecc.uncorrected", False)]
