"""What a lost node costs each item of a check (run/losses.py): an item that covers it names it unreachable, an
item over other nodes (a pair's) says the loss was outside it, never reads as if its own nodes were lost."""

from __future__ import annotations

from clustercheck.errors import HarnessError, Unreachable
from clustercheck.run.losses import Losses


def test_a_pool_start_that_lost_one_node_names_it_only_where_it_belongs() -> None:
    losses = Losses(["n1", "n2", "n3"])
    exc = Unreachable("rank 0 (n1) was lost with its node's agent (n1)", ("n1",))
    out = losses.cost(["n1,n2", "n2,n3", "n1,n3"], exc)
    assert isinstance(out["n1,n2"], Unreachable) and out["n1,n2"].nodes == ("n1",)
    assert isinstance(out["n1,n3"], Unreachable) and out["n1,n3"].nodes == ("n1",)
    other = out["n2,n3"]
    assert type(other) is HarnessError
    assert str(other) == ("not measured: the check's ranks lost n1, outside this item: rank 0 (n1) was lost with "
                          "its node's agent (n1)")


def test_a_later_pool_start_keeps_its_prefix_and_an_error_naming_no_node_is_copied_as_it_is() -> None:
    losses = Losses(["n1", "n2", "n3"])
    exc = Unreachable("rank 4 (n3) was lost", ("n3",))
    assert str(losses.cost(["n1,n2"], exc, "not measured: ")["n1,n2"]) == (
        "not measured: the check's ranks lost n3, outside this item: rank 4 (n3) was lost")
    plain = losses.cost(["n1,n2", None], HarnessError("the store did not answer"))
    assert [str(e) for e in plain.values()] == ["the store did not answer"] * 2
