"""--counters: a check whose pool cannot start still has its counter window closed (run/runner.py `run` and
`localize`, their failed-start branches): what rose while its ranks tried to start is that check's, never
the next one's. Real gloo ranks and a real kernel log record (an Xid written to /dev/kmsg, root only)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import one_kernel_log
from test_counter_windows import KMSG, XID
from test_pool import PARAMS

from clustercheck.counters.allowances import Judgement
from clustercheck.errors import HarnessError, Unreachable
from clustercheck.kinds.base import CheckSpec
from clustercheck.run.failure import RankFailure
from clustercheck.run.options import Options
from clustercheck.run.pool import PoolKey
from clustercheck.run.pools import PoolManager
from clustercheck.run.runner import Layout, Runner

pytestmark = [pytest.mark.pool,
              pytest.mark.skipif(os.geteuid() != 0 or not os.access(KMSG, os.W_OK), reason="writing /dev/kmsg needs root")]


def check(name: str, scope: str = "node", env: tuple[tuple[str, str], ...] = ()) -> CheckSpec:
    return CheckSpec(name, "all_reduce", scope, dict(PARAMS), env, 60, "", "s.yaml", 1)


@pytest.mark.parametrize("scope", ["node", "localize"])
def test_a_check_whose_pool_cannot_start_closes_its_window_and_the_next_starts_clean(tmp_path: Path,
                                                                                      scope: str) -> None:
    """a measures; b's pool fails to start (an Xid is logged as its ranks come up); c measures. b's window
    holds the Xid and c's is clean. Failed before the fix: b's window was never closed, so b's items had no
    window and c was blamed for b's Xid."""
    pools = PoolManager(tmp_path / "logs")
    real_get = pools.get

    def get(key: PoolKey):  # b's ranks start for real, and the start then fails as a GPU falls off the bus
        if dict(key.env).get("BROKEN"):
            KMSG.write_text(XID + "\n")
            real_get(key)
            pools.discard(key)
            raise RankFailure("rank 1 exited with 1 during starting the ranks")
        return real_get(key)

    with one_kernel_log():
        try:
            host = pools.get(PoolKey("gloo", 2)).ranks[0]["host"]
            runner = Runner(pools, Options(None, [], 2, "gloo", tmp_path / "out", counters=True),
                            Layout("gloo", [host], 2))
            runner.run(check("a"), {})
            pools.get = get  # type: ignore[method-assign]
            broken = check("b", scope, (("BROKEN", "1"),))
            if scope == "node":
                assert isinstance(runner.run(broken, {})[host], HarnessError)
            else:  # one local node: localize's own two-node floor is beside the point of a failed start
                runner.applies = lambda c: None  # type: ignore[method-assign]
                with pytest.raises(HarnessError) as info:
                    runner.localize(broken, 1e-6)
                assert not isinstance(info.value, Unreachable) and "kernel.xid.79" in str(info.value)
            b = runner.windows[host]
            assert runner.windows_of == "b" and isinstance(b, Judgement), b
            assert [f.increase.name for f in b.findings if not f.passed] == ["kernel.xid.79"], b
            runner.run(check("c"), {})
            c = runner.windows[host]
            assert isinstance(c, Judgement) and all(f.passed for f in c.findings), c
        finally:
            pools.close(kill=True)



def test_a_localize_check_that_runs_first_opens_the_first_window(tmp_path: Path) -> None:
    """`run` takes the first counter snapshot as its pool comes up; `localize` did not, so a localize check
    that ran first had no snapshot before it: every node's window read `no counter snapshot from <host>
    before the check`, an error on healthy hardware. Two hosts (hosts launcher), a localize check first."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from joining import LIMITS, all_reduce_suite, results
    from test_hosts_agents import run

    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(
        LIMITS + "  fabric:\n    busbw: {limit: '>= 0.000001', unit: GB/s, source: any working link}\n")
    (tmp_path / "s.yaml").write_text(all_reduce_suite("fabric:localize"))
    with one_kernel_log():
        out = run(tmp_path, "--counters").communicate(timeout=240)[0]
    data = results(tmp_path)
    assert "no counter snapshot" not in out, out[-3000:]
    assert {r["name"]: r["outcome"] for r in data["results"]} == \
        {"fabric[h1]": "passed", "fabric[h2]": "passed", "fabric": "passed"}, out[-3000:]
