"""A rail down on every node (a rail's leaf switch failed: the same mlx5_X down everywhere) lowers no node's
line rate, so the fabric floor keeps the healthy bar (clustercheck/fabric/linerate.py): a chosen port that is
down counts at its fastest ACTIVE sibling's rate, and a down port with no sibling of its model leaves the
node's rate unknown, naming the port, never summed without it. Built inline: eight ConnectX-7 NDR ports as
/sys/class/infiniband writes them, each sharing a PCIe switch with a GPU."""

from __future__ import annotations

from clustercheck.fabric import linerate
from clustercheck.fabric.rdma import NetFacts, Port
from clustercheck.judging.fabric import FabricRule, floor, line_rate, run_fabric


def _port(i: int, up: bool = True, hca: str | None = "MT4129") -> Port:
    # a down NDR port's rate file still says some rate (the kernel's default SDR): its own rate is no evidence
    return Port(f"mlx5_{i}", 1, "ACTIVE" if up else "DOWN", "LinkUp" if up else "Disabled",
                400.0 if up else 10.0, "400 Gb/sec (4X NDR)" if up else "10 Gb/sec (4X SDR)", "InfiniBand",
                f"0000:{0x18 + i:02x}:00.0", hca_type=hca, board_id="MT_0000000838" if hca else None)


def _node(*ports: Port) -> NetFacts:
    return NetFacts(tuple(ports), nic_paths={p.device: {"level": "PIX"} for p in ports})


def test_a_rail_down_on_every_node_keeps_the_line_rate_and_the_floor() -> None:
    down = _node(*[_port(i, up=i != 0) for i in range(8)])
    rate = linerate.of_node(down)
    assert rate.gbps == 3200.0, rate
    assert "mlx5_0/1 at 400 Gb/s as mlx5_1/1" in rate.why and "1 of them not ACTIVE/LinkUp" in rate.why
    assert linerate.of_run({"a": down, "b": down}).gbps == 3200.0
    healthy = _node(*[_port(i) for i in range(8)])
    rule = FabricRule()
    bars = []
    for nodes in ({"a": healthy, "b": healthy}, {"a": down, "b": down}):
        rf = run_fabric({n: {"network": f.as_dict()} for n, f in nodes.items()}, "nccl", {}, None)
        bars.append(getattr(floor(rule, "all_gather", line_rate(rf.expect, rule, rf.node_rate), "c"), "value"))
    assert bars[0] == bars[1], bars


def test_a_down_port_with_no_sibling_of_its_model_leaves_the_rate_unknown_naming_it() -> None:
    # neither CA type nor board id read: nothing on the node says what the down port runs at
    unknown = _node(*[_port(i, up=i != 3, hca=None) for i in range(8)])
    rate = linerate.of_node(unknown)
    assert rate.gbps is None and rate.why.startswith("mlx5_3/1 is not ACTIVE/LinkUp"), rate
    assert linerate.of_run({"a": unknown, "b": unknown}).gbps is None
    # a healthy node in the run still sets the bar the degraded one fails against
    healthy = _node(*[_port(i) for i in range(8)])
    assert linerate.of_run({"a": unknown, "b": healthy}).gbps == 3200.0
