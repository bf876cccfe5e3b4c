"""Name the bad nodes, node pairs (links) and switch uplinks of a cluster in few rounds of tests.

Pure: standard library and python-hostlist only (no torch, no pytest), so the simulator and the
session share it. docs/localize.md has the design, its bound and the measured table.
"""

from clustercheck.localize.model import Evidence, Finding, Group, Outcome, Part, Verdicts, exercised, ring_edges
from clustercheck.localize.planner import Planner, Ring, screen_rings
from clustercheck.localize.topology import (Topology, load_topology, parse_topology_conf, read_topology,
                                            topology_from_mapping)

__all__ = [
    "Evidence", "Finding", "Group", "Outcome", "Part", "Planner", "Ring", "Topology", "Verdicts", "exercised",
    "load_topology", "parse_topology_conf", "read_topology", "ring_edges", "screen_rings", "topology_from_mapping",
]
