"""A repeated run (--repeat, --duration) measures each check again in each repetition: what one repetition
found, an error of the whole check included, is never read by the next (run/session.py `measure`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from clustercheck.errors import HarnessError
from clustercheck.kinds.base import CheckSpec
from clustercheck.run.launcher import Launcher
from clustercheck.run.options import Options
from clustercheck.run.session import CheckSession


def test_a_check_that_errored_whole_in_one_repetition_is_measured_again_in_the_next(tmp_path: Path) -> None:
    """Check b errors whole in repetition 1 (its pool could not start, say) and measures in 2 and 3: each
    repetition measures it once, its items read that repetition's outcome, and a window left from an earlier
    check is never b's. Failed before the fix: b was measured once, and repetitions 2 and 3 read repetition
    1's error word for word."""
    check = CheckSpec("b", "all_reduce", "node", {}, (), 60.0, "", "s.yaml", 3)
    session = CheckSession.__new__(CheckSession)
    session.options = Options(None, [], 2, "gloo", tmp_path)
    session.nodes, session.baseline, session._cache = ["n1", "n2"], None, {}
    session.over, session.stopped = None, None
    session.launcher = Launcher()  # the local launcher: the launch plane stands, no node is absent
    session.runner = SimpleNamespace(repetition=1, windows_of="b", live=lambda: ["n1", "n2"])  # type: ignore[assignment]
    measured: list[int] = []
    windows: list[object] = []

    def measure_all(c: CheckSpec) -> dict[str, str]:
        measured.append(session.runner.repetition)  # type: ignore[union-attr]
        windows.append(session.runner.windows_of)  # type: ignore[union-attr]
        if session.runner.repetition == 1:  # type: ignore[union-attr]
            raise HarnessError("b: the ranks could not start (repetition 1)")
        return {n: f"{n} in repetition {session.runner.repetition}" for n in ("n1", "n2")}  # type: ignore[union-attr]

    session._measure_all = measure_all  # type: ignore[method-assign, assignment]
    for repetition in (1, 2, 3):
        session.runner.repetition = repetition  # type: ignore[union-attr]
        for node in ("n1", "n2"):
            try:
                got = session.measure(check, f"s::b[{node}]", node)
            except HarnessError as exc:
                got = str(exc)
            assert got == ("b: the ranks could not start (repetition 1)" if repetition == 1
                           else f"{node} in repetition {repetition}"), (repetition, node)
        session.runner.windows_of = "b"  # type: ignore[union-attr]  # as the repetition's b left it
    assert measured == [1, 2, 3] and windows == [None, None, None]
    assert session._cache == {}  # nothing of an earlier repetition stays
