"""env: harmful NCCL/CUDA settings fail by name; allowed ones pass; the live environment is judged."""

from __future__ import annotations

import pytest

from clustercheck.probes import ProbeParseError, env, get, run_live

ENV_TEXT = "# source: a job's env\n\nPATH=/usr/bin\nNCCL_DEBUG=INFO\nexport NCCL_P2P_DISABLE=1\nNCCL_IB_HCA=mlx5\n"


def test_harmful_setting_fails_by_name():
    verdicts = env.judge(env.parse(ENV_TEXT), {})
    assert [(v.subject, v.passed) for v in verdicts] == [("NCCL_P2P_DISABLE", False)]


def test_allowed_by_platform():
    verdicts = env.judge(env.parse(ENV_TEXT), {"nccl_env_allow": ["NCCL_P2P_DISABLE"]})
    assert all(v.passed for v in verdicts)


@pytest.mark.parametrize("line", ["NCCL_P2P_LEVEL=LOC", "NCCL_NET_GDR_LEVEL=LOC", "NCCL_IB_DISABLE=1",
                                  "NCCL_NVLS_ENABLE=0", "CUDA_LAUNCH_BLOCKING=1", "NCCL_DEBUG=trace"])
def test_each_harmful_value(line):
    assert not env.judge(env.parse(line), {})[0].passed


@pytest.mark.parametrize("line", ["NCCL_P2P_DISABLE=0", "NCCL_P2P_LEVEL=NVL", "NCCL_DEBUG=WARN"])
def test_harmless_values(line):
    assert all(v.passed for v in env.judge(env.parse(line), {}))


def test_not_env_output_is_a_parse_error():
    with pytest.raises(ProbeParseError):
        env.parse("no assignments here\n")


def test_live_environment(monkeypatch):
    monkeypatch.setenv("NCCL_SHM_DISABLE", "1")
    outcome = run_live(get("env"), {})
    assert outcome.outcome == "failed" and outcome.failures[0].subject == "NCCL_SHM_DISABLE"
    monkeypatch.delenv("NCCL_SHM_DISABLE")
    assert run_live(get("env"), {}).outcome == "passed"
