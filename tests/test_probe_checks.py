"""Probes as checks in a suite: real results on this machine, skips with reasons, failures named."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from helpers import write_suite

REPO = Path(__file__).resolve().parent.parent


def test_node_health_suite_on_this_machine(project: pytest.Pytester) -> None:
    (project.path / "thresholds" / "cpu.yaml").write_text((REPO / "thresholds" / "cpu.yaml").read_text())
    write_suite(project, (REPO / "suites" / "node-health.yaml").read_text())
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out", "-rs")
    outcomes = res.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0
    results = {r["check"]: r for r in json.loads((project.path / "out" / "latest" / "results.json").read_text())["results"]}
    for check in ("versions", "nccl-env", "pci-acs"):  # need no GPU: real verdicts here
        assert results[check]["outcome"] == "passed" and results[check]["verdicts"], check
    if not Path("/dev/nvidiactl").exists():
        for check in ("topology", "nvlink", "fabric", "ecc", "throttle"):
            assert results[check]["outcome"] == "skipped" and "nvidia-smi" in results[check]["message"]


def test_harmful_nccl_setting_fails_and_names_the_variable(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n  - id: nccl-env\n    measure: probe\n    env: {NCCL_P2P_DISABLE: '1'}\n"
                         "    params: {probe: env}\n")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*NCCL_P2P_DISABLE*"])
    case = ET.parse(project.path / "out" / "latest" / "junit.xml").getroot().find(".//testcase")
    assert case is not None and case.find("failure") is not None


def test_unknown_probe_is_a_one_line_suite_error(project: pytest.Pytester) -> None:
    write_suite(project, "checks:\n  - id: x\n    measure: probe\n    params: {probe: acs}\n")
    res = project.runpytest("suites/s.yaml", "--thresholds", "thresholds", "--cc-out", "out")
    assert res.ret == 4
    res.stdout.fnmatch_lines(["suites/s.yaml:4: checks?0?.params.probe: must be one of versions, env, pci-acs*"])
