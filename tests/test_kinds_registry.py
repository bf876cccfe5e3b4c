"""The registry of measure kinds: a kind installed as a package's `clustercheck.kinds` entry point is found
and run like a built-in one; a registration that cannot work is refused with one line naming the kind and
what is wrong; a built-in kind is replaced only when asked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import UserError
from clustercheck.kinds import KINDS, register
from clustercheck.kinds.subjects import per_subject
from clustercheck.schema import Fields

PLUGIN = '''\
"""A measure kind shipped by a package of its own, found through its entry point."""
from clustercheck.kinds.base import Kind
from clustercheck.kinds.subjects import per_subject


def _parse(f):
    params = {"base": f.get("base", int, 7)}
    f.done()
    return params


def measure(ctx, params):
    value = params["base"] + ctx.rank
    return {"subjects": {f"rank{ctx.rank}": {"answer": {"median": value, "min": value, "max": value}}}}


KIND = Kind("entry_kind", ("node",), {"answer": "count"}, _parse, "each rank answers base + its rank",
            "entrykind:measure", per_subject({"answer": "count"}))
'''

PROFILE = '''\
platform: cpu
description: test profile
detect:
  gpu_count: 0
checks:
  from-entry-point:
    answer: {limit: ">= 7", unit: count, source: "rank 0 answers 7"}
'''

SUITE = "checks:\n  - id: from-entry-point\n    measure: entry_kind\n"


def _distribution(root: Path, entry: str) -> None:
    """An installed distribution as importlib.metadata finds one on sys.path: a dist-info directory."""
    info = root / "entrykind-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: entrykind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[clustercheck.kinds]\nentry = {entry}\n")


def _clustercheck(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run([sys.executable, "-m", "clustercheck", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300)


@pytest.mark.pool
def test_a_kind_from_an_entry_point_runs_through_clustercheck_run(tmp_path: Path) -> None:
    (tmp_path / "entrykind.py").write_text(PLUGIN)
    _distribution(tmp_path, "entrykind:KIND")
    (tmp_path / "thresholds").mkdir()
    (tmp_path / "thresholds" / "cpu.yaml").write_text(PROFILE)
    (tmp_path / "s.yaml").write_text(SUITE)
    res = _clustercheck(tmp_path, "run", "s.yaml", "--thresholds", "thresholds", "--out", "out")
    assert res.returncode == 0, res.stdout + res.stderr
    results = json.loads((tmp_path / "out" / "latest" / "results.json").read_text())["results"]
    assert [(r["check"], r["measure"], r["outcome"]) for r in results] == [
        ("from-entry-point", "entry_kind", "passed")]
    assert [(v["subject"], v["measured"]) for v in results[0]["verdicts"]] == [("rank0", 7.0), ("rank1", 8.0)]


def test_a_broken_entry_point_stops_the_run_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "entrykind.py").write_text(PLUGIN.replace('"entrykind:measure"', '"entrykind:nowhere"'))
    _distribution(tmp_path, "entrykind:KIND")
    (tmp_path / "s.yaml").write_text(SUITE)
    res = _clustercheck(tmp_path, "run", "s.yaml", "--out", "out")
    assert res.returncode == 4, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines == ["clustercheck: error: entry point clustercheck.kinds: entry = entrykind:KIND: measure kind "
                     "'entry_kind': runner entrykind:nowhere: entrykind defines no 'nowhere' at its top level"], lines
    assert "Traceback" not in res.stdout + res.stderr and not (tmp_path / "out").exists()


def _fields(**over: Any) -> dict[str, Any]:
    def parse(f: Fields) -> dict[str, Any]:
        f.done()
        return {}
    return {"name": "tiny", "scopes": ("node",), "metrics": {"answer": "count"}, "parse": parse,
            "description": "d", "runner": "clustercheck.measure.copies:gemm", "judge": per_subject({}), **over}


@pytest.mark.parametrize("over, message", [
    ({"scopes": ("planet",)}, "scopes ('planet',): each must be one of node, cluster, pair, gpu, gpu-pair, localize"),
    ({"scopes": "node"}, "scopes 'node': each must be one of"),
    ({"metrics": {"distance": "furlongs"}}, "metric unit distance: 'furlongs' is not a unit (known: GB/s"),
    ({"runner": "nomod"}, "runner 'nomod': expected 'module:function'"),
    ({"runner": "nomod_at_all:fn"}, "runner nomod_at_all:fn: no module 'nomod_at_all' on this Python's path"),
    ({"runner": "clustercheck.measure.copies:nothing"}, "runner clustercheck.measure.copies:nothing: "
                                                       "clustercheck.measure.copies defines no 'nothing'"),
    ({"name": "All Reduce"}, "the name must be 1-64 lower-case letters"),
    ({"judge": "not callable"}, "judge must be callable"),
    ({"figure": "pie"}, "figure 'pie': one of sweep, matrix, bars, none"),
    ({"unit": "GB/s"}, "unexpected keyword argument 'unit'"),
])
def test_a_bad_registration_is_one_line_naming_the_kind(over: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError) as info:
        register(**_fields(**over))
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"measure kind {_fields(**over)['name']!r}: "), text
    assert message in text, text
    assert _fields(**over)["name"] not in KINDS


def test_replacing_a_builtin_kind_needs_replace_true() -> None:
    builtin = KINDS["all_reduce"]
    with pytest.raises(UserError, match="measure kind 'all_reduce': already registered "
                                        r"\(clustercheck.measure.collectives:collective\); pass replace=True"):
        register(**_fields(name="all_reduce"))
    assert KINDS["all_reduce"] is builtin
    try:
        replaced = register(**_fields(name="all_reduce"), replace=True)
        assert KINDS["all_reduce"] is replaced
    finally:
        register(builtin, replace=True)
    assert KINDS["all_reduce"] is builtin


def test_the_controller_checks_a_runner_without_importing_it() -> None:
    """A rank-side module imports torch; checking that the runner exists must not (the controller never
    needs torch): a fresh interpreter registers a kind and has not imported torch or the module."""
    code = ("import sys\nfrom clustercheck.kinds import KINDS, register\nfrom clustercheck.kinds.subjects import per_subject\n"
            "register(name='probe_free', scopes=('node',), metrics={}, parse=lambda f: {}, description='d', "
            "runner='clustercheck.measure.copies:gemm', judge=per_subject({}))\n"
            "print(sorted(m for m in ('torch', 'clustercheck.measure', 'clustercheck.measure.copies') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], text=True, capture_output=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_plugin_kinds_unknown_param_is_refused_though_its_parse_never_calls_done(tmp_path: Path) -> None:
    """A plugin's parse that reads its keys and returns without `f.done()` silently dropped a misspelt one
    (`bse: 9` ran with base 7); the loader refuses what parse did not read, naming file, line and key."""
    from clustercheck.suite.load import load_suite

    def parse(f: Fields) -> dict[str, Any]:
        return {"base": f.get("base", int, 7)}  # no f.done()

    register(**_fields(name="no_done", parse=parse))
    try:
        suite = tmp_path / "s.yaml"
        suite.write_text("checks:\n  - id: c\n    measure: no_done\n    params:\n      base: 3\n")
        assert load_suite(suite).checks[0].params == {"base": 3}
        suite.write_text("checks:\n  - id: c\n    measure: no_done\n    params:\n      bse: 9\n")
        with pytest.raises(UserError) as info:
            load_suite(suite)
        assert str(info.value) == f"{suite}:5: checks[0].params.bse: unknown key; did you mean 'base'?"
    finally:
        KINDS._kinds.pop("no_done", None)
