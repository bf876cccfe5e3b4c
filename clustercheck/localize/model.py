"""What one test exercises, and what the planner concludes.

Measurement model. A group is run as one ring all_reduce with its ranks in `members` order, so it
sends data over k links (member i to member i+1, the last back to the first); a group of 2 is one
link. The group's bandwidth is the minimum over the health of its members, the links its ring uses
and the switch uplinks those links cross, times measurement noise: a healthy group passes, a group
with any slow or dead part fails. A pass therefore clears every part it exercised. A pair-specific
fault between two nodes under different leaf switches cannot be told from a fault on the route
between the leaves, so such traffic is charged to the uplinks it crosses, never to a node pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple, Union

from clustercheck.localize.topology import Topology

Kind = Literal["node", "link", "switch"]
Purpose = Literal["screen", "pair", "helper", "probe", "wrap", "retest"]
# What the caller reports for a group: a bandwidth (judged against the planner's threshold), a verdict,
# or None when the group produced no measurement (a rank died or hung): no result, which clears nothing and
# blames nothing (the harness could not measure; it is no evidence about any part).
Outcome = Union[float, bool, None]


def usable(outcome: Outcome) -> Outcome:
    """The outcome as the planner judges it: a bandwidth no link can read (NaN, an infinity, a negative) is
    no measurement (None), never a pass."""
    if outcome is None or isinstance(outcome, bool):
        return outcome
    return outcome if math.isfinite(outcome) and outcome >= 0 else None


class Part(NamedTuple):
    """A node (`key` = (node,)), a link (two nodes, sorted) or a switch uplink ((switch,)). A typed
    tuple rather than a dataclass: inference hashes and compares parts some 10^5 times a round at
    8,192 nodes, and a tuple does both in C (a third of the time)."""

    kind: Kind
    key: tuple[str, ...]

    @property
    def name(self) -> str:
        """A link's two nodes joined by " <-> ": hostnames hold dashes, so "a-b-c" would not say which."""
        return " <-> ".join(self.key)


def node(n: str) -> Part:
    return Part("node", (n,))


def link(u: str, v: str) -> Part:
    return Part("link", (u, v) if u <= v else (v, u))


def uplink(switch: str) -> Part:
    return Part("switch", (switch,))


@dataclass(frozen=True)
class Group:
    """One test of a round. The session runs it as a ring all_reduce with ranks in `members` order."""

    id: str
    round: int
    members: tuple[str, ...]
    purpose: Purpose


def ring_edges(members: tuple[str, ...]) -> list[tuple[str, str]]:
    """The node pairs a ring over `members` sends between: k of them for k >= 3, one for a pair."""
    k = len(members)
    if k < 2:
        return []
    if k == 2:
        return [(members[0], members[1])]
    return [(members[i], members[(i + 1) % k]) for i in range(k)]


def exercised(members: tuple[str, ...], topology: Topology) -> frozenset[Part]:
    """Every part whose fault would slow this group (the measurement model above)."""
    parts = {node(m) for m in members}
    for u, v in ring_edges(members):
        crossed = topology.crossed(u, v)
        if crossed:
            parts.update(uplink(s) for s in crossed)
        else:
            parts.add(link(u, v))
    return frozenset(parts)


@dataclass(frozen=True)
class Evidence:
    """A test that implicates a part: its group, the round, the members and what it measured."""

    group: str
    round: int
    members: tuple[str, ...]
    outcome: Outcome


@dataclass(frozen=True)
class Finding:
    """A part named faulty. `confidence` is 1 - q**n, where n counts the failed tests this part alone
    explains and q (0.05) is the chance that one failed test was a transient or a noisy reading."""

    kind: Kind
    name: str
    nodes: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    confidence: float


@dataclass(frozen=True)
class Verdicts:
    """The planner's conclusions. `suspects` are parts that some failure points at but that the tests
    could not tell apart from another part (never blamed); `unexplained` are failed groups every part
    of which passed elsewhere (a transient or a noisy reading); `cleared` are nodes a passing test
    exercised; `untested` are nodes neither cleared nor named; `no_result` are the groups that gave no
    measurement (neither passed nor failed: they clear and blame nobody); `masked` are switches whose uplink
    no passing test cleared and no finding or suspect holds: never judged; `never_crossed` are switches whose
    uplink no test that gave a result crossed at all; `untested_links` the same for links between nodes
    not blamed, never tested apart from a failed part."""

    rounds: int
    tests: int
    findings: tuple[Finding, ...]
    suspects: tuple[tuple[Part, ...], ...]
    unexplained: tuple[str, ...]
    cleared: frozenset[str]
    untested: tuple[str, ...]
    every_test_failed: bool
    no_result: tuple[Evidence, ...] = ()
    masked: tuple[str, ...] = ()
    never_crossed: tuple[str, ...] = ()  # switches whose uplink no test that gave a result crossed: never judged
    untested_links: tuple[str, ...] = ()  # links (Part.name) only failed groups sent over, none of it blamed
    measured: frozenset[str] = frozenset()  # nodes some group that gave a result held  # switches whose uplink only failed groups crossed, never tested apart

    def named(self, kind: Kind) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]
