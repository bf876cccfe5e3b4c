"""Judges against ranks' answers that would pass by accident: rows paired by position, a `wrong` that cancels,
a NaN pair, a port rate of -400, a GPU never run. Each is a named harness error, a failed verdict or
`not judged`, never a pass (the fail-closed rule, README.md)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError, NotMeasured
from clustercheck.judging.limits import Limit
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, CheckSpec, Rules
from clustercheck.run.judge import judge
from clustercheck.schema import Fields

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evidence import TOOLS, text  # noqa: E402

MiB = 1 << 20


def spec(measure: str, params: dict[str, Any], scope: str = "node") -> CheckSpec:
    kind = KINDS[measure]
    return CheckSpec("x", measure, scope, kind.parse(Fields(params, "s.yaml", "checks[0].params")), (), 60.0, "",
                     "s.yaml", 1)


def limit(metric: str, op: str, value: float, unit: str) -> Limit:
    return Limit("x", metric, op, value, unit, f"{op} {value}", "test source", "t.yaml:3")


# -- ib_write_bw: a port rate that is no rate ---------------------------------------------------------------

def _ib(rate: Any, peers: dict[str, Any] | None = None) -> Answers:
    client = {"outcome": "ran", "stdout": (TOOLS / "ib_write_bw" / "roce-cx5-100g-deepops.txt").read_text(),
              "returncode": 0, "timed_out": False}  # 92.40 Gb/s
    run = {"device": "mlx5_0", "port": 1, "rate_gbps": rate, "up": True, "client": client, "server": {}}
    result = {"host": "n1", "binary": "ib_write_bw", "outcome": "ran", "runs": [run], **({"peers": peers} if peers else {})}
    return Answers(spec("ib_write_bw", {}), [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


@pytest.mark.parametrize("rate", [-400.0, 0.0, math.nan, math.inf, "400", True])
def test_a_port_rate_that_is_no_rate_leaves_the_nic_not_judged_naming_it(rate: Any) -> None:
    """A rate of -400 made a floor of -360 Gb/s that every NIC passed."""
    with pytest.raises(HarnessError, match=r"ib_write_bw on n1 \(mlx5_0\): not judged: the port's rate from sysfs "
                                           r"\(.*\) is not a rate and no ib_write_bw_min is given"):
        judge(_ib(rate), Rules({}), {})


def test_a_sibling_rate_that_is_no_rate_leaves_the_ports_own_rate_as_the_floor() -> None:
    out = judge(_ib(400.0, {"mlx5_0/1": {"fastest_gbps": -1, "others": 1, "model": "MT4129"}}), Rules({}), {})
    assert [(v.subject, v.passed) for v in out.verdicts] == [("mlx5_0", False)]  # 92.4 of 400 Gb/s
    assert out.verdicts[0].rule.value == pytest.approx(360.0)  # type: ignore[union-attr]
    assert "its sibling ports' fastest rate -1 is not a rate" in out.verdicts[0].rule.source
