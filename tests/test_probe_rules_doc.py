"""docs/probe-rules.md names, for every probe, the expectation keys it reads: the table "What each probe fails
on without any expectation" (its last column) and the sentence after it for the probes the table leaves out.
Held to each probe's expect_keys, which tests/test_probe_expect_keys.py holds to what its judge reads: the
`ib` row named `ib_rate_gbps, ib_ports, gdr` while the probe also reads `fabric_ports`."""

from __future__ import annotations

import re
from pathlib import Path

from clustercheck import probes
from clustercheck.judging.expect import EXPECT_KEYS, TOPOLOGY_KEYS

DOC = (Path(__file__).resolve().parent.parent / "docs" / "probe-rules.md").read_text(encoding="utf-8")
KNOWN = set(EXPECT_KEYS) | {f"topology.{k}" for k in TOPOLOGY_KEYS}


def keys_in(text: str) -> set[str]:
    """The expectation keys a doc cell names in backticks (`gpu_count`, `gds: true`), values left out."""
    return {m.split(":")[0].strip() for m in re.findall(r"`([^`]+)`", text)} & KNOWN


def documented() -> dict[str, set[str]]:
    section = DOC.split("## What each probe fails on without any expectation", 1)[1].strip("\n")
    rows, rest = section.split("\n\n", 2)[:2]
    out: dict[str, set[str]] = {}
    for line in rows.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = keys_in(cells[-1])
    assert rest.startswith("The other probes read these keys"), rest[:80]
    for part in rest.split(": ", 1)[1].rstrip(".\n").split("; "):
        name, _, keys = part.partition(" ")
        out[name] = keys_in(keys)
    return out


def test_every_probe_and_the_keys_it_reads_are_in_probe_rules() -> None:
    doc = documented()
    assert set(doc) == set(probes.NAMES), set(probes.NAMES) ^ set(doc)
    for name in probes.NAMES:
        assert doc[name] == set(probes.get(name).expect_keys), name
