"""Counter snapshots and deltas per check window (issue 17): sysfs readers on this machine and on copied
trees built from real captures, the injected delta of acceptance 2 (a counter file changed between two
snapshots fails exactly the window that contained the change), fail-closed reading, allowances."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import allowances_of
from clustercheck.counters import DEFAULTS, Snapshot, Sources, delta, judge, take
from clustercheck.judging.windows import verdicts
from clustercheck.counters import allowances, sysfs
from clustercheck.errors import UserError
from evidence import FIXTURES
from test_sources import problems

AER = FIXTURES / "sysfs-aer" / "linux-abi-aer-stats-sample.txt"
KMSG = FIXTURES / "kernel-log" / "gpud-kmsg-nvswitch-node.txt"
IB_MLX5 = FIXTURES / "ib-counters" / "gpud-pr943-mlx5_1-port1-counters.txt"
IB_NO_PMA = FIXTURES / "ib-counters" / "node-exporter-966-i40iw-no-pma.txt"
DEV = "0000:00:1c.0"


def body(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# source: ") and lines[1] == ""
    return lines[2:]


def aer_tree(root: Path) -> Path:
    """The kernel's sample aer_dev_* files (Documentation/ABI) laid out as /sys/bus/pci/devices/<dev>/."""
    files: dict[str, list[str]] = {}
    for line in body(AER):
        if " # cat " in line:
            current = files.setdefault(line.rsplit(" ", 1)[1], [])
        else:
            current.append(line)
    (root / DEV).mkdir(parents=True)
    for name, lines in files.items():
        (root / DEV / name).write_text("\n".join(lines) + "\n")
    return root


def bump(path: Path, name: str, by: int) -> None:
    """Raise one named error and the TOTAL_ERR_* line of an aer_dev_* file, as the kernel would."""
    out = []
    for line in path.read_text().splitlines():
        key, _, value = line.rpartition(" ")
        out.append(f"{key} {int(value) + by}" if key == name or key.startswith("TOTAL_ERR_") else line)
    path.write_text("\n".join(out) + "\n")


@pytest.fixture
def sources(tmp_path: Path) -> Sources:
    empty = tmp_path / "empty"
    empty.mkdir()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("\n".join(body(KMSG)) + "\n")
    return Sources(pci=aer_tree(tmp_path / "pci"), ib=empty / "ib", thermal=empty, cpus=empty,
                   cpuinfo=empty / "cpuinfo", kmsg=kmsg, nvml=False)


def test_aer_reads_the_kernels_format_with_its_breakdown(sources: Sources) -> None:
    r = sysfs.aer(sources.pci)
    got = {c.name: c for c in r.counters}
    assert set(got) == {"pcie.aer.correctable", "pcie.aer.fatal", "pcie.aer.nonfatal"} and not r.errors
    assert got["pcie.aer.correctable"].value == 2 and got["pcie.aer.correctable"].device == DEV
    assert ("Receiver Error", 2) in got["pcie.aer.correctable"].parts and len(got["pcie.aer.fatal"].parts) == 17


def test_acceptance_2_a_changed_counter_file_fails_exactly_the_window_that_contained_it(sources: Sources) -> None:
    fatal = sources.pci / DEV / "aer_dev_fatal"
    s0 = take(sources=sources, host="node1")
    s1 = take(s0, sources, "node1")                      # item A: nothing changes
    bump(fatal, "Surprise Down Error", 1)                # item B: the link went down once
    s2 = take(s1, sources, "node1")
    s3 = take(s2, sources, "node1")                      # item C: nothing changes after it
    windows = {name: judge(delta(a, b)) for name, (a, b) in {"A": (s0, s1), "B": (s1, s2), "C": (s2, s3)}.items()}
    assert {name: [f.increase.text() for f in j.failed] for name, j in windows.items()} == {
        "A": [], "B": [f"pcie.aer.fatal on {DEV} rose by 1 (0 -> 1; Surprise Down Error +1)"], "C": []}
    assert all(not j.findings and not j.errors for name, j in windows.items() if name != "B")  # no delta at all
    (v,) = verdicts(windows["B"], "burn")
    assert (v.metric, v.measured, v.passed, v.subject) == ("pcie.aer.fatal", 1.0, False, f"node1 {DEV}")
    assert "allowed 0" in (v.detail or "") and "uncorrectable PCIe error" in v.rule.source


def test_correctable_errors_within_the_rate_pass_and_a_burst_fails(sources: Sources) -> None:
    before = take(sources=sources, host="n")
    bump(sources.pci / DEV / "aer_dev_correctable", "Bad TLP", 3)
    after = take(before, sources, "n")
    (ok,) = judge(delta(before, after)).findings  # 32/min over a sub-second window rounds up to 1...
    assert ok.allowed == 1 and not ok.passed       # ...so 3 fail
    rate = judge(delta(before, after), {**DEFAULTS, "pcie.aer.correctable": allowances.Allowance(
        "pcie.aer.correctable", 32, True, "test", "test")})
    longer = judge(delta(Snapshot(**{**before.__dict__, "taken": before.taken - 60}), after),
                   {"pcie.aer.correctable": rate.findings[0].allowance})
    assert longer.findings[0].allowed == 33 and longer.findings[0].passed
    assert longer.findings[0].increase.parts == (("Bad TLP", 3),)


def test_a_vanished_counter_is_a_failed_verdict_and_a_garbled_one_an_error_never_zero(sources: Sources) -> None:
    before = take(sources=sources, host="n")
    (sources.pci / DEV / "aer_dev_fatal").unlink()
    (sources.pci / DEV / "aer_dev_nonfatal").write_text("Undefined zero\n")
    j = judge(delta(before, take(before, sources, "n")))
    assert [(e.kind, e.device, e.what) for e in j.vanished] == [("vanished", DEV, "pcie.aer.fatal")]
    assert [e.kind for e in j.harness_errors] == ["unreadable"] and "Undefined zero" in j.harness_errors[0].error
    assert [v.passed for v in verdicts(j, "x")] == [False]


def test_a_counter_that_went_down_was_reset_and_cannot_be_judged(sources: Sources) -> None:
    bump(sources.pci / DEV / "aer_dev_fatal", "ECRC", 5)
    before = take(sources=sources, host="n")
    bump(sources.pci / DEV / "aer_dev_fatal", "ECRC", -5)
    j = judge(delta(before, take(before, sources, "n")))
    assert not j.findings and [e.kind for e in j.harness_errors] == ["reset"]


def test_readers_on_this_machines_own_sysfs_say_what_is_absent() -> None:
    aer = sysfs.aer()
    if list(Path("/sys/bus/pci/devices").glob("*/aer_dev_*")):
        assert aer.counters and not aer.notes
    else:
        assert not aer.counters and "no PCIe AER statistics" in aer.notes[0]
    zones = list(Path("/sys/class/thermal").glob("thermal_zone*"))
    th = sysfs.thermal()
    assert not th.errors  # a zone not read is a note (a gauge no verdict reads)
    assert len(th.gauges) + len(th.notes) == len(zones) if zones else "no thermal zones" in th.notes[0]
    assert sysfs.ib().notes if not Path("/sys/class/infiniband").is_dir() else True
    mhz = sysfs.cpu_mhz()
    assert len(mhz.gauges) == os.cpu_count() and all(g.value > 0 and g.unit == "MHz" for g in mhz.gauges)


def ib_tree(root: Path, capture: Path) -> Path:
    """The capture's counter files, laid out under <root>/<dev>/ports/<n>/counters/."""
    if "=== ./" in capture.read_text():
        lines = [l for l in body(capture) if l]
        pairs = [(lines[i][6:-4], lines[i + 1]) for i in range(0, len(lines), 2)]
        where = root / "mlx5_1" / "ports" / "1" / "counters"
    else:
        pairs = [tuple(l.split("/counters/")[1].split(":", 1)) for l in body(capture)]  # type: ignore[misc]
        where = root / "i40iw0" / "ports" / "1" / "counters"
    where.mkdir(parents=True)
    for name, value in pairs:
        (where / name).write_text(value + "\n")
    return root


def test_ib_port_counters_from_a_real_capture_saturated_ones_are_errors(tmp_path: Path) -> None:
    r = sysfs.ib(ib_tree(tmp_path, IB_MLX5))
    got = {c.name: c.value for c in r.counters}
    assert len(got) == 12 and got["ib.port_rcv_switch_relay_errors"] == 2 and "ib.port_xmit_wait" not in got
    assert {c.device for c in r.counters} == {"mlx5_1/1"}
    assert sorted(e.what.rsplit("/", 1)[1] for e in r.errors if e.kind == "saturated") == [
        "excessive_buffer_overrun_errors", "link_downed", "port_xmit_discards"]


def test_ib_counters_a_nic_without_pma_reports_are_notes_not_zeros(tmp_path: Path) -> None:
    r = sysfs.ib(ib_tree(tmp_path, IB_NO_PMA))
    assert not r.counters and not r.errors and len(r.notes) == 6  # port_rcv_data is no error counter
    assert all("N/A (no PMA)" in n for n in r.notes)


def test_an_ib_counter_that_rose_between_snapshots_names_port_and_counter(tmp_path: Path, sources: Sources) -> None:
    ib = ib_tree(tmp_path / "ib", IB_MLX5)
    src = Sources(**{**sources.__dict__, "ib": ib})
    before = take(sources=src, host="n")
    (ib / "mlx5_1/ports/1/counters/symbol_error").write_text("7\n")
    j = judge(delta(before, take(before, src, "n")))
    assert [f.text(j.seconds).split(" in ")[0] for f in j.failed] == ["ib.symbol_error on mlx5_1/1 rose by 7 (0 -> 7)"]
    assert {e.kind for e in j.harness_errors} == {"saturated"}  # the capture's saturated counters stay errors


def test_snapshots_cross_the_wire_as_builtins(sources: Sources) -> None:
    s = take(sources=sources, host="n")
    assert Snapshot.from_dict(json.loads(json.dumps(s.as_dict()))) == s
    with pytest.raises(ValueError, match="different nodes"):
        delta(s, take(s, sources, "other"))


def test_a_profiles_counters_block_refines_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("platform: p\ncounters:\n  kernel.xid.43: {allow: 5, source: \"clustercheck's test\"}\n"
                    "  pcie.aer.correctable: {allow: 2/min, source: \"clustercheck's test\"}\n")
    rules = allowances_of(path)
    assert allowances.allowance_for("kernel.xid.43", rules).allowed(10) == 5
    assert allowances.allowance_for("kernel.xid.79", rules).allowed(10) == 0
    assert allowances.allowance_for("pcie.aer.correctable", rules).allowed(90) == 3
    assert allowances.allowance_for("gpu.ecc.uncorrected", rules).origin == "built in"
    assert allowances.allowance_for("nvlink.crc_flit", rules).counter == "nvlink"


@pytest.mark.parametrize("text, key, line", [
    ("counters:\n  pcie.aer.correctable: {allow: 1, source: s}\n  disk.smart: {allow: 1, source: s}\n", "disk.smart", 3),
    ("counters:\n  ib.symbol_error: {allow: -1, source: s}\n", "allow", 2),
    ("counters:\n  ib.symbol_error: {allow: 3/hour, source: s}\n", "allow", 2),
    ("counters:\n  ib.symbol_error: {allow: " + "9" * 400 + "/min, source: s}\n", "allow", 2),  # inf: crashed judging
    ("counters:\n  ib.symbol_error: {allow: 0x" + "f" * 1200 + ", source: s}\n", "allow", 2),  # str() refuses it
    ("counters:\n  ib.symbol_error: {allow: 1}\n", "source", 2),
    ("counters:\n  ib.symbol_error: {allow: 1, source: s, limit: 2}\n", "limit", 2),
])
def test_a_bad_counters_block_is_one_line_naming_file_line_and_key(tmp_path: Path, text: str, key: str,
                                                                   line: int) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        allowances_of(path)
    assert f"p.yaml:{line}: " in str(err.value) and key in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_every_default_allowance_cites_a_public_source(name: str) -> None:
    assert not problems(DEFAULTS[name].source), DEFAULTS[name].source


def test_a_nodes_first_rank_takes_the_snapshot_live_and_the_others_answer_nothing() -> None:
    from types import SimpleNamespace

    from clustercheck.counters.snapshot import rank_snapshot

    first = rank_snapshot(SimpleNamespace(local_rank=0, host="here"), {"previous": None})["snapshot"]
    second = rank_snapshot(SimpleNamespace(local_rank=0, host="here"), {"previous": first})["snapshot"]
    before, after = Snapshot.from_dict(first), Snapshot.from_dict(second)
    assert before.host == "here" and before.cursor is not None and after.taken >= before.taken
    assert not [e for e in before.errors + after.errors if e.reader == "kernel.log"]  # /dev/kmsg is readable here
    assert rank_snapshot(SimpleNamespace(local_rank=1, host="here"), {"previous": None}) == {}


def test_an_errored_checks_counter_line_names_a_few_unjudged_nodes_then_counts_the_rest() -> None:
    from clustercheck.judging.windows import errored_check

    windows = {f"n{i}": f"no counter snapshot from n{i} after the check" for i in range(1, 65)}
    said = errored_check(windows)  # 64 nodes' reasons in the error's first line before
    assert said.endswith("; and 61 more node(s) not judged") and said.count("no counter snapshot") == 3
