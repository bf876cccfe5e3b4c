"""The switch tree's files: what one reading could silently get wrong is refused with file, line and key
(exit 4: a UserError), and a deep tree parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.localize import load_topology, parse_topology_conf


def _refused(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_topology(path)
    return str(info.value)


def test_a_switch_defined_twice_in_json_is_refused_naming_it_and_its_second_line(tmp_path: Path) -> None:
    # json keeps the last "S": L1 lost its parent and became a root, and a<->c traffic "crossed" an
    # uplink of L1 that is not there
    path = tmp_path / "t.json"
    path.write_text('{"L1": {"nodes": "a,b"}, "L2": {"nodes": "c,d"},\n "S": {"switches": ["L1"]},\n'
                    ' "S": {"switches": ["L2"]}}\n')
    assert _refused(path) == f"{path}:3: S: defined twice"


def test_a_key_twice_inside_a_json_switch_is_refused_naming_its_path(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{\n "L1": {"nodes": "a,b",\n        "nodes": "c"},\n "L2": {"nodes": ["d"], "switches": []}\n}\n')
    assert _refused(path) == f"{path}:3: L1.nodes: defined twice"


def test_the_same_name_in_two_json_switches_is_no_repeat(tmp_path: Path) -> None:
    path = tmp_path / "t.json"  # "nodes" in each switch, and a name that is also a string value elsewhere
    path.write_text('{"L1": {"nodes": ["a", "b"]}, "L2": {"nodes": "c,d"}, "S": {"switches": "L1,L2"}}')
    topo = load_topology(path)
    assert dict(topo.parent_of) == {"L1": "S", "L2": "S"} and topo.crossed("a", "c") == ("L1", "L2")


@pytest.mark.parametrize("line, key", [("SwitchName=L1 Nodes=a,b Nodes=c", "Nodes"),  # dropped a and b
                                       ("SwitchName=L1 Nodes=a,b SwitchName=L9", "SwitchName"),  # renamed L1
                                       ("SwitchName=L1 Nodes=a,b switches=L2 Switches=L3", "Switches")])
def test_a_key_twice_on_one_topology_conf_line_is_refused_naming_file_line_and_key(
        tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "topology.conf"
    path.write_text(f"SwitchName=L2 Nodes=d\nSwitchName=L3 Nodes=e\n{line}\n")
    assert _refused(path) == f"{path}:3: {key}: given twice on one line"


def test_a_deep_switch_chain_parses_and_a_loop_in_it_is_still_refused() -> None:
    # 1,500 levels took 19 s to parse when each switch walked up a list of those it had seen
    depth = 1500
    chain = "".join(f"SwitchName=s{i} Nodes=h{i}" + (f" Switches=s{i - 1}" if i else "") + "\n" for i in range(depth))
    topo = parse_topology_conf(chain, "chain.conf")
    assert topo.up("s0") == [f"s{i}" for i in range(depth)]
    assert topo.crossed("h0", f"h{depth - 1}") == tuple(f"s{i}" for i in range(depth - 1))
    looped = chain.replace("SwitchName=s0 Nodes=h0", f"SwitchName=s0 Nodes=h0 Switches=s{depth - 1}")
    with pytest.raises(UserError) as info:
        parse_topology_conf(looped, "chain.conf")
    message = str(info.value)
    assert message.startswith("chain.conf:") and "switches form a loop: " in message
    assert message.count(" -> ") == depth  # every switch of the loop, back to the first


def test_a_loop_above_a_sound_chain_is_named_alone() -> None:
    text = "SwitchName=a Nodes=n1\nSwitchName=b Switches=a\nSwitchName=c Switches=b,d\nSwitchName=d Switches=c\n"
    with pytest.raises(UserError) as info:
        parse_topology_conf(text, "t.conf")
    assert str(info.value) == "t.conf:3: switches form a loop: c -> d -> c"  # not the sound a -> b below it
