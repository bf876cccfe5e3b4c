"""Simulated cluster for the localization planner, against a full pairwise sweep and two-pass pairs.

    python benchmarks/localize_sim.py --nodes 1024 --bad-nodes 10 --bad-links 2 --bad-switches 1 --seed 3 --json
    python benchmarks/localize_sim.py --sweep            # the table of docs/localize.md (20 seeds a row)

Cluster: N nodes n00000.. in leaf switches of --leaf-size under one spine. Faults: slow nodes (a
factor 0.3-0.6 of nominal bandwidth; --dead-nodes of them dead: they read 0), slow links (a node
pair, factor 0.3-0.6), slow switch uplinks (factor 0.3-0.6), transients (a healthy node at 0.5 during
one round, drawn from 1-3), multiplicative Gaussian noise of relative sigma --noise on every test, and
--outliers (chance that a test reads 0.3-0.8 of its value). A group measures nominal x min over the
health of the parts clustercheck.localize.model.exercised() names (members, ring links, uplinks
crossed), x noise; it passes at >= 80% of nominal. Links are drawn among neighbours in node order
under one leaf (the pairs a ring in that order uses; --link-pool leaf draws any pair of a leaf).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from clustercheck.localize import Planner, Topology, ring_edges

NOMINAL = 100.0
THRESHOLD = 80.0
Pair = tuple[str, str]


@dataclass(frozen=True)
class Faults:
    nodes: dict[str, float]  # node -> health factor, 0 = dead
    links: dict[Pair, float]  # sorted pair -> factor
    switches: dict[str, float]  # leaf switch -> factor of its uplink
    transients: dict[str, tuple[int, float]]  # node -> (round, factor)
    noise: float
    outliers: float
    rng: random.Random = field(compare=False)


def cluster(n: int, leaf_size: int) -> tuple[list[str], Topology]:
    nodes = [f"n{i:05d}" for i in range(n)]
    leaf_of = {nd: f"leaf{i // leaf_size:03d}" for i, nd in enumerate(nodes)}
    parent = {leaf: "spine" for leaf in set(leaf_of.values())} if n > leaf_size else {}
    return nodes, Topology.build(leaf_of, parent)


def make_faults(nodes: list[str], topo: Topology, seed: int, bad_nodes: int, dead_nodes: int, bad_links: int,
                bad_switches: int, transients: int, noise: float, outliers: float, link_pool: str) -> Faults:
    rng = random.Random(seed)
    # a leaf of one node: its uplink and the node are in the same tests, no test can tell them apart
    leaves = sorted(lf for lf in set(topo.leaf_of.values()) if sum(1 for x in nodes if topo.leaf(x) == lf) > 1)
    switches = {s: rng.uniform(0.3, 0.6) for s in rng.sample(leaves, min(bad_switches, len(leaves) - 1))} \
        if len(leaves) > 2 else {}  # with two leaves every cross test crosses both uplinks: no telling them apart
    bad = rng.sample(nodes, bad_nodes)
    node_f = {nd: (0.0 if i < dead_nodes else rng.uniform(0.3, 0.6)) for i, nd in enumerate(bad)}
    if link_pool == "leaf":
        pool = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:i + 64] if topo.leaf(a) == topo.leaf(b)]
    else:
        pool = [(a, b) for a, b in zip(nodes, nodes[1:]) if topo.leaf(a) == topo.leaf(b)]
    pool = [p for p in pool if p[0] not in node_f and p[1] not in node_f]  # a dead end hides its link
    links: dict[Pair, float] = {}
    while len(links) < bad_links and pool:
        a, b = pool.pop(rng.randrange(len(pool)))
        if not ({a, b} & {x for p in links for x in p}):
            links[(a, b)] = rng.uniform(0.3, 0.6)
    calm = [nd for nd in nodes if nd not in node_f and not any(nd in p for p in links)]
    trans = {nd: (rng.randint(1, 3), 0.5) for nd in rng.sample(calm, min(transients, len(calm)))}
    return Faults(node_f, links, switches, trans, noise, outliers, random.Random(seed + 1_000_003))


def measure(f: Faults, topo: Topology, members: tuple[str, ...], rnd: int) -> float | None:
    h = 1.0
    for m in members:
        h = min(h, f.nodes.get(m, 1.0))
        t = f.transients.get(m)
        if t and t[0] == rnd:
            h = min(h, t[1])
    for u, v in ring_edges(members):
        h = min(h, f.links.get((u, v) if u < v else (v, u), 1.0))
        for s in topo.crossed(u, v):
            h = min(h, f.switches.get(s, 1.0))
    if h == 0.0:  # a dead part reads 0, a failure; no measurement (None) would clear and blame nobody
        return 0.0
    value = NOMINAL * h * (1 + f.noise * f.rng.gauss(0, 1))
    if f.rng.random() < f.outliers:
        value *= f.rng.uniform(0.3, 0.8)
    return value


def result(rounds: int, tests: int, f: Faults, nodes: set[str], links: set[Pair], switches: set[str]) -> dict[str, Any]:
    return {"rounds": rounds, "tests": tests,
            "found_nodes": sorted(nodes), "true_nodes": sorted(f.nodes),
            "found_links": sorted(list(p) for p in links), "true_links": sorted(list(p) for p in f.links),
            "found_switches": sorted(switches), "true_switches": sorted(f.switches)}


def run_planner(nodes: list[str], topo: Topology, f: Faults, max_rounds: int = 4) -> dict[str, Any]:
    planner = Planner(nodes, topo, threshold=THRESHOLD, max_rounds=max_rounds)
    while groups := planner.next_round():
        planner.record({g.id: measure(f, topo, g.members, g.round) for g in groups})
    v = planner.verdicts()
    return result(v.rounds, v.tests, f, {x.name for x in v.named("node")},
                  {(x.nodes[0], x.nodes[1]) for x in v.named("link")}, {x.name for x in v.named("switch")})


def run_two_pass(nodes: list[str], topo: Topology, f: Faults, seed: int) -> dict[str, Any]:
    """GoogleCloudPlatform/cluster-health-scanner src/health_runner/nccl_runner.py: disjoint random pairs,
    then each failed node with a randomly chosen passed node; bad = failed both passes."""
    rng = random.Random(seed + 7)
    order = list(nodes)
    rng.shuffle(order)
    first = [(order[i], order[i + 1]) for i in range(0, len(order) - 1, 2)]
    failed1 = [p for p in first if not _ok(measure(f, topo, p, 1))]
    suspects = [n for p in failed1 for n in p]
    passed = [n for p in first for n in p if n not in set(suspects)]
    rng.shuffle(passed)
    failed2 = {s for s, h in zip(suspects, passed) if not _ok(measure(f, topo, (s, h), 2))}
    untested = set(suspects[len(passed):])
    bad = failed2 | untested
    links = {tuple(sorted(p)) for p in failed1 if not ({p[0], p[1]} & bad)}  # both later passed: link or transient?
    rounds = 1 + bool(failed1)
    return result(rounds, len(first) + len(failed2) + min(len(suspects), len(passed)) - len(failed2), f, bad,
                  {(a, b) for a, b in links}, set())


def run_pairwise(nodes: list[str], topo: Topology, f: Faults) -> dict[str, Any]:
    """Every pair once, in n-1 rounds of disjoint pairs (circle method; clustercheck.run.pairs). Only pairs
    that touch a fault, or that noise fails, can fail; the others are drawn as a count of false fails."""
    n = len(nodes)
    leaf = {nd: topo.leaf(nd) for nd in nodes}
    touched = set(f.nodes) | {x for p in f.links for x in p} | set(f.transients)
    bad_leaves = set(f.switches)
    fails: set[Pair] = set()
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if a in touched or b in touched or (leaf[a] != leaf[b] and (leaf[a] in bad_leaves or leaf[b] in bad_leaves)):
                if not _ok(measure(f, topo, (a, b), 2)):  # a transient hits one round in n-1: at most one pair
                    fails.add((a, b))
    clean = n * (n - 1) // 2
    p0 = 0.5 * math.erfc((1 - THRESHOLD / NOMINAL) / (f.noise * math.sqrt(2))) if f.noise else 0.0
    p0 += f.outliers * 0.5
    for _ in range(_poisson(f.rng, clean * p0)):
        a, b = sorted(f.rng.sample(nodes, 2))
        fails.add((a, b))
    per_node: dict[str, list[int]] = {nd: [0, 0] for nd in nodes}  # intra-leaf fails, intra-leaf pairs
    cross: dict[str, list[int]] = {}
    size = {lf: sum(1 for x in nodes if leaf[x] == lf) for lf in set(leaf.values())}
    for a, b in fails:
        if leaf[a] == leaf[b]:
            per_node[a][0] += 1
            per_node[b][0] += 1
        else:
            for lf in (leaf[a], leaf[b]):
                cross.setdefault(lf, [0])[0] += 1
    bad = {nd for nd in nodes if size[leaf[nd]] > 1 and per_node[nd][0] > (size[leaf[nd]] - 1) / 2}
    cross_pairs = {lf: s * (n - s) for lf, s in size.items()}
    switches = {lf for lf, c in cross.items() if c[0] > cross_pairs[lf] / 2}
    links = {p for p in fails if not ({*p} & bad) and leaf[p[0]] == leaf[p[1]]}
    return result(n - 1 if n % 2 == 0 else n, n * (n - 1) // 2, f, bad, links, switches)


def _ok(value: float | None) -> bool:
    return value is not None and value >= THRESHOLD


def _poisson(rng: random.Random, lam: float) -> int:
    count, t = 0, rng.expovariate(1.0) if lam > 0 else math.inf
    while t < lam:
        count += 1
        t += rng.expovariate(1.0)
    return count


def exact(r: dict[str, Any]) -> bool:
    return all(r[f"found_{k}"] == r[f"true_{k}"] for k in ("nodes", "links", "switches"))


def blamed_healthy(r: dict[str, Any]) -> int:
    return len(set(r["found_nodes"]) - set(r["true_nodes"]))


SWEEP: list[dict[str, Any]] = [
    dict(nodes=64, bad_nodes=1, bad_links=1, bad_switches=0),
    dict(nodes=128, bad_nodes=1, bad_links=1, bad_switches=1),
    dict(nodes=256, bad_nodes=3, bad_links=1, bad_switches=1),
    dict(nodes=1024, bad_nodes=10, bad_links=2, bad_switches=1),
    dict(nodes=1024, bad_nodes=10, bad_links=2, bad_switches=1, noise=0.10),
    dict(nodes=1024, bad_nodes=10, bad_links=2, bad_switches=1, transients=2),
    dict(nodes=1024, bad_nodes=10, bad_links=2, bad_switches=1, outliers=0.002),
    dict(nodes=1024, bad_nodes=10, bad_links=2, bad_switches=1, link_pool="leaf"),
    dict(nodes=1024, bad_nodes=0, bad_links=0, bad_switches=0),
    dict(nodes=8192, bad_nodes=80, bad_links=0, bad_switches=0),
    dict(nodes=8192, bad_nodes=80, bad_links=8, bad_switches=2),
]


def sweep(seeds: int, pairwise_upto: int) -> None:
    print(f"{seeds} seeds a row (0..{seeds - 1}); leaf switches of 32 nodes; exact = every bad node, link and "
          "switch named and nothing else")
    head = (f"{'N':>5} {'nodes/links/sw':>14} {'noise':>5} {'extra':>13} | {'planner rounds':>14} {'tests':>6} "
            f"{'exact':>5} {'healthy':>7} | {'pairwise rounds':>15} {'exact':>5} | {'two-pass rounds':>15} "
            f"{'exact':>5} {'healthy':>7} {'links':>5} {'sw':>3}")
    print(head)
    for row in SWEEP:
        cfg = dict(noise=0.05, dead_nodes=min(2, row["bad_nodes"]), transients=0, outliers=0.0, link_pool="neighbours",
                   leaf_size=32) | row
        plan, pair, two = [], [], []
        t0 = time.perf_counter()
        for seed in range(seeds):
            nodes, topo, faults = setup(cfg, seed)
            plan.append(run_planner(nodes, topo, faults))
            two.append(run_two_pass(nodes, topo, setup(cfg, seed)[2], seed))
            if cfg["nodes"] <= pairwise_upto:
                pair.append(run_pairwise(nodes, topo, setup(cfg, seed)[2]))
        rounds = [r["rounds"] for r in plan]
        extra = ",".join(f"{k}={cfg[k]}" for k in ("transients", "outliers") if cfg[k]) or \
            ("links:any-in-leaf" if cfg["link_pool"] == "leaf" else "-")
        pw = (f"{pair[0]['rounds']:>15} {sum(map(exact, pair)):>2}/{seeds:<2}" if pair
              else f"{cfg['nodes'] - 1:>15} {'n/s':>5}")
        print(f"{cfg['nodes']:>5} {cfg['bad_nodes']:>4}/{cfg['bad_links']}/{cfg['bad_switches']:<7} {cfg['noise']:>5} "
              f"{extra:>13} | {min(rounds)}-{max(rounds)} (mean {statistics.mean(rounds):.2f}) "
              f"{statistics.mean(r['tests'] for r in plan):>6.0f} {sum(map(exact, plan)):>2}/{seeds:<2} "
              f"{sum(map(blamed_healthy, plan)):>7} | {pw} | "
              f"{max(r['rounds'] for r in two):>15} {sum(map(exact, two)):>2}/{seeds:<2} "
              f"{sum(map(blamed_healthy, two)):>7} {_hits(two, 'links'):>5} {_hits(two, 'switches'):>3}"
              f"   ({time.perf_counter() - t0:.1f} s)", flush=True)


def _hits(runs: list[dict[str, Any]], kind: str) -> str:
    found = sum(len({tuple(x) if isinstance(x, list) else x for x in r[f"found_{kind}"]} &
                    {tuple(x) if isinstance(x, list) else x for x in r[f"true_{kind}"]}) for r in runs)
    return f"{found}/{sum(len(r[f'true_{kind}']) for r in runs)}"


def setup(cfg: dict[str, Any], seed: int) -> tuple[list[str], Topology, Faults]:
    nodes, topo = cluster(cfg["nodes"], cfg["leaf_size"])
    faults = make_faults(nodes, topo, seed, cfg["bad_nodes"], cfg["dead_nodes"], cfg["bad_links"], cfg["bad_switches"],
                         cfg["transients"], cfg["noise"], cfg["outliers"], cfg["link_pool"])
    return nodes, topo, faults


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1024)
    p.add_argument("--leaf-size", type=int, default=32)
    p.add_argument("--bad-nodes", type=int, default=10)
    p.add_argument("--dead-nodes", type=int, default=None, help="how many of the bad nodes are dead (default 2)")
    p.add_argument("--bad-links", type=int, default=2)
    p.add_argument("--bad-switches", type=int, default=1)
    p.add_argument("--transients", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.05)
    p.add_argument("--outliers", type=float, default=0.0)
    p.add_argument("--link-pool", choices=("neighbours", "leaf"), default="neighbours")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--method", choices=("planner", "pairwise", "two-pass"), default="planner")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--sweep", action="store_true", help="print the comparison table")
    p.add_argument("--seeds", type=int, default=20, help="seeds a sweep row")
    p.add_argument("--pairwise-upto", type=int, default=1024, help="largest N the sweep simulates pairwise for")
    a = p.parse_args(argv)
    if a.sweep:
        sweep(a.seeds, a.pairwise_upto)
        return 0
    if a.nodes < 2 or a.bad_nodes > a.nodes:
        p.error("--nodes must be >= 2 and --bad-nodes at most --nodes")
    cfg = dict(nodes=a.nodes, leaf_size=a.leaf_size, bad_nodes=a.bad_nodes, bad_links=a.bad_links,
               bad_switches=a.bad_switches, transients=a.transients, noise=a.noise, outliers=a.outliers,
               link_pool=a.link_pool, dead_nodes=min(2, a.bad_nodes) if a.dead_nodes is None else a.dead_nodes)
    nodes, topo, faults = setup(cfg, a.seed)
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "planner": lambda: run_planner(nodes, topo, faults),
        "pairwise": lambda: run_pairwise(nodes, topo, faults),
        "two-pass": lambda: run_two_pass(nodes, topo, faults, a.seed)}
    out = runners[a.method]()
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>15}: {v}")
        print(f"{'exact':>15}: {exact(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
