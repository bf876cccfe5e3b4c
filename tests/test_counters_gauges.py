"""The snapshot's gauges (thermal zones' temperature, CPU clocks) are read for the record and judged by no
verdict (the watch samples its own): one that cannot be read is a note naming the file, never a harness
error that left every item of the node `not judged`, nor, for a file gone after it was listed, a failed
`vanished` verdict."""

from __future__ import annotations

from pathlib import Path

from clustercheck.counters import Sources, delta, judge, take
from clustercheck.judging.windows import item_verdicts
from test_counters import KMSG, aer_tree, body


def node(tmp_path: Path, temp: str) -> Sources:
    """AER counters of a real tree, one thermal zone whose temp file reads `temp`, a real kernel log."""
    zone = tmp_path / "thermal" / "thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("x86_pkg_temp\n")
    (zone / "temp").write_text(temp)
    empty = tmp_path / "empty"
    empty.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(body(KMSG)) + "\n")
    return Sources(pci=aer_tree(tmp_path / "pci"), ib=empty / "ib", thermal=tmp_path / "thermal", cpus=empty,
                   cpuinfo=empty / "cpuinfo", drm=empty / "drm", kmsg=kmsg, nvml=False)


def test_a_thermal_zone_that_reads_no_number_leaves_the_nodes_counters_judged(tmp_path: Path) -> None:
    sources = node(tmp_path, "\n")  # empty: the zone's driver gave no temperature
    before = take(sources=sources, host="node1")
    j = judge(delta(before, take(before, sources, "node1")))
    assert not j.harness_errors and not j.vanished, j.errors
    temp = tmp_path / "thermal" / "thermal_zone0" / "temp"
    assert any(n.startswith("thermal.temp of thermal_zone0 (x86_pkg_temp) not read") and str(temp) in n
               for n in j.notes), j.notes
    assert all(v.passed for v in item_verdicts("c", {"node1": j}, ["node1"]))


def test_a_thermal_zone_gone_during_the_window_fails_nothing(tmp_path: Path) -> None:
    sources = node(tmp_path, "45000\n")
    before = take(sources=sources, host="node1")
    (tmp_path / "thermal" / "thermal_zone0" / "temp").unlink()  # listed, then its file gone
    j = judge(delta(before, take(before, sources, "node1")))
    assert not j.harness_errors and not j.vanished, j.errors
    assert all(v.passed for v in item_verdicts("c", {"node1": j}, ["node1"]))
