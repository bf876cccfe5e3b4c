"""`clustercheck run SUITE --expect KEY` that no selected check reads is refused (one line, exit 4) before any
check runs, never run and passed; and each kind's declared expect keys (`Kind.expect_keys`, `Kind.reads`) are
the keys clustercheck's code reads out of an expectation mapping for it, found by reading that code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck import probes
from clustercheck.errors import UserError
from clustercheck.judging.expect import EXPECT_KEYS, TOPOLOGY_KEYS
from clustercheck.kinds import KINDS, register
from clustercheck.kinds.base import Kind
from clustercheck.suite.load import load_suite

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "clustercheck"
SUITES = PACKAGE / "data" / "suites"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")

MIXED = """\
suite: mixed
description: a probe check beside an all_reduce one
checks:
  - {id: nvlink-links, measure: probe, params: {probe: nvlink}, description: active NVLinks}
  - {id: nvlink-own, measure: probe, params: {probe: nvlink, expect: {nvlinks_per_gpu: 12}}, description: its own}
  - {id: topo-amd, measure: probe, params: {probe: amd-smi}, description: amd-smi reads topology.gpu_gpu only}
  - id: allreduce-one
    description: one small all_reduce
    measure: all_reduce
    scope: node
    params: {sizes: [1KiB], warmup: 1, iters: 2}
  - id: gds-write
    description: gdsio writes only
    measure: gdsio
    params: {io: [write]}
  - id: ib-own-devices
    description: ib_write_bw on devices of its own
    measure: ib_write_bw
    params: {devices: [mlx5_0]}
"""


def cc(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clustercheck", "run", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def refused_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 4, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    return lines[0]


# -- through the real CLI --------------------------------------------------------------------------------------

def test_a_key_no_check_of_the_run_reads_is_refused_before_any_rank_and_no_run_is_recorded(tmp_path: Path) -> None:
    p = cc("cpu-smoke", "--expect", "nvlinks_per_gpu=18", "--out", tmp_path / "runs")
    assert refused_line(p) == ("ERROR: --expect nvlinks_per_gpu: no check of this run reads it (the checks read: net, "
                               "gdr, nics, p2p, fabric_gbps, fabric_ports)")
    assert "passed" not in p.stdout
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))  # nothing measured, nothing recorded


def test_deselection_that_left_out_the_only_reader_is_named(tmp_path: Path) -> None:
    suite = tmp_path / "mixed.yaml"
    suite.write_text(MIXED)
    p = cc(suite, "--expect", "ib_rate_gbps=400", "-k", "allreduce", "--out", tmp_path / "runs")
    assert refused_line(p) == "ERROR: --expect ib_rate_gbps: no check of this run reads it (the checks read: net, gdr, " \
                              "nics, p2p, fabric_gbps, fabric_ports)"
    p = cc(suite, "--expect", "nvlinks_per_gpu=18", "-k", "allreduce", "--out", tmp_path / "runs")
    assert refused_line(p) == ("ERROR: --expect nvlinks_per_gpu: no check selected for this run reads it (deselected: "
                               "nvlink-links; the selected checks read: net, gdr, nics, p2p, fabric_gbps, fabric_ports)")
    assert not list((tmp_path / "runs").glob("*/run.jsonl"))


def test_a_typed_key_a_selected_check_reads_runs_and_the_profiles_own_block_is_never_refused(tmp_path: Path) -> None:
    """cpu.yaml's expect: names gpu_count and acs_redirect, which no all_reduce reads: the profile's block
    serves every kind and is not refused; p2p, which the collectives read, is taken."""
    p = cc("cpu-smoke", "--expect", "p2p=true", "--out", tmp_path / "runs", "--no-progress")
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert list((tmp_path / "runs").glob("*/run.jsonl"))


# -- what the refusal decides, on the suites' real checks ----------------------------------------------------

def checks_of(text: str, tmp_path: Path) -> list:
    path = tmp_path / "mixed.yaml"
    path.write_text(text)
    return list(load_suite(path, "mixed.yaml").checks)


def refusal(typed: dict, selected: list, tmp_path: Path) -> str | None:
    from clustercheck.run.expect_read import refuse_unread

    try:
        refuse_unread(typed, selected, [("mixed.yaml", tmp_path / "mixed.yaml")])
    except UserError as exc:
        return str(exc)
    return None


def test_what_each_check_reads_follows_its_params(tmp_path: Path) -> None:
    checks = {c.id: c for c in checks_of(MIXED, tmp_path)}
    only = [checks["nvlink-own"]]  # its own params set nvlinks_per_gpu: the run's would reach no judge
    assert refusal({"nvlinks_per_gpu": 18}, only, tmp_path) is not None
    assert refusal({"gpu_count": 8}, only, tmp_path) is None
    amd = [checks["topo-amd"]]
    assert refusal({"topology": {"gpu_gpu": "XGMI"}}, amd, tmp_path) is None
    assert "--expect topology.gpu_nic: no check" in str(refusal({"topology": {"gpu_nic": ["PIX"]}}, amd, tmp_path))
    gds = [checks["gds-write"]]
    assert refusal({"gdsio_write_min": 5}, gds, tmp_path) is None
    assert "--expect gdsio_read_min: no check of this run" in str(refusal({"gdsio_read_min": 5}, gds, tmp_path))
    ib = [checks["ib-own-devices"]]
    assert refusal({"ib_write_bw_min": 380}, ib, tmp_path) is None
    assert "--expect fabric_ports: no check selected for this run reads it (deselected: allreduce-one; the selected " \
           "checks read: ib_write_bw_min)" == refusal({"fabric_ports": ["mlx5_0"]}, ib, tmp_path)
    assert refusal({}, [], tmp_path) is None  # nothing typed: nothing to refuse, whatever the checks


@pytest.mark.parametrize("suite", sorted(SUITES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_key_a_shipped_suite_reads_is_one_it_declares_and_one_the_parser_takes(suite: Path) -> None:
    for check in load_suite(suite).checks:
        for key in KINDS[check.measure].reads(check):
            top, _, sub = key.partition(".")
            assert top in EXPECT_KEYS and (not sub or top == "topology" and sub in TOPOLOGY_KEYS), (check.id, key)
            declared = KINDS[check.measure].expect_keys
            if check.measure != "probe":  # a probe check's: its probe's, held by tests/test_probe_expect_keys.py
                assert key in declared, (check.id, key, declared)
            else:
                assert key in probes.get(check.params["probe"]).expect_keys


def test_a_kind_declaring_a_key_no_expect_block_takes_is_refused_at_registration() -> None:
    kind = KINDS["gemm"]
    fields = {f: getattr(kind, f) for f in kind.__dataclass_fields__}
    with pytest.raises(UserError, match="expect_keys: 'nvlink_count' is no expect: key"):
        register(Kind(**{**fields, "name": "gemm_typo", "expect_keys": ("nvlink_count",)}))
    with pytest.raises(UserError, match="expect_keys: 'topology.gpu_cpu' is no expect: key"):
        register(Kind(**{**fields, "name": "gemm_typo", "expect_keys": ("topology.gpu_cpu",)}))
    assert "gemm_typo" not in KINDS


# -- the declarations stay true: every read of an expectation mapping in clustercheck's code ------------------

# A read: `expect.get("KEY"` or `expect["KEY"]` (rules.expect, run.expect alike), or by a variable whose keys the
# table below names; `expect["KEY"] = ...` is a write (judging/derive.py writes a derived profile's block).
READ = re.compile(r"\bexpect(?:\.get\(|\[)\s*(?:\"(\w+)\"|(\w+))(\]\s*=(?!=))?")
# file -> (the kinds whose checks it reads expectations for, the keys read through a variable, by variable)
READERS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "kinds/collectives.py": (COLLECTIVES, {"k": ("net", "gdr", "nics")}),  # TRANSPORT_KEYS
    "fabric/transport.py": (COLLECTIVES, {"key": ("net", "gdr")}),  # transport_verdicts -> judge
    "judging/fabric.py": (COLLECTIVES, {}),  # the multi-node floor's line rate (run/judge.py, session.py)
    "kinds/gdsio.py": (("gdsio",), {"key": ("gdsio_write_min", "gdsio_read_min")}),
    "kinds/ib_write_bw.py": (("ib_write_bw",), {}),
}
# read by no kind's check: the probes' (tests/test_probe_expect_keys.py), the parser's, and fabric_rule, which
# the probe CLI hands its probes and no user types (EXPECT_KEYS has it not)
OUTSIDE = ("probes/", "judging/expect.py")


def reads_in_code() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(PACKAGE))
        if name.startswith(OUTSIDE):
            continue
        for m in READ.finditer(path.read_text(encoding="utf-8")):
            literal, variable, write = m.groups()
            if write or literal == "fabric_rule":
                continue
            assert name in READERS, f"{name} reads an expectation ({m.group(0)}): add its kinds to READERS and " \
                                    f"the key to their expect_keys"
            keys = (literal,) if literal else READERS[name][1].get(variable or "")
            assert keys, f"{name}: {m.group(0)}: a key read through {variable!r}: name its keys in READERS"
            out.setdefault(name, set()).update(keys)
    return out


def test_every_key_the_code_reads_for_a_kind_is_declared_by_that_kind() -> None:
    seen = reads_in_code()
    assert set(seen) == set(READERS), "a reader in READERS reads nothing now: take it out"
    for name, keys in seen.items():
        for kind in READERS[name][0]:
            missing = keys - set(KINDS[kind].expect_keys)
            assert not missing, f"{kind} does not declare {sorted(missing)}, which {name} reads for it"


def test_every_key_a_kind_declares_is_read_for_it_by_the_code() -> None:
    seen = reads_in_code()
    for kind in KINDS.values():
        if kind.name == "probe":  # its probe's keys; kinds/probe.py hands the mapping on whole
            assert kind.expect_keys == () and kind.expect_keys_of is not None
            continue
        read = set().union(*(keys for name, keys in seen.items() if kind.name in READERS[name][0]))
        assert set(kind.expect_keys) == read, (kind.name, kind.expect_keys, sorted(read))
