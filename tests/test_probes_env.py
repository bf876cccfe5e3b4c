"""env: harmful NCCL/CUDA settings fail by name, with values read as NCCL reads them (strtoll base 0);
allowed ones pass; the live environment is judged."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest

from clustercheck.cli import main
from clustercheck.probes import env
from clustercheck.probes import get, run_live
from clustercheck.probes.base import ProbeParseError

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


@pytest.mark.parametrize("line", ["NCCL_P2P_DISABLE=0x1", "NCCL_P2P_DISABLE=01", "NCCL_P2P_DISABLE=1 # comment"])
def test_the_issue_inputs_fail_through_the_cli(tmp_path, capsys, line):
    f = tmp_path / "env.txt"
    f.write_text(line + "\n")
    assert main(["probe", "env", "--input", str(f)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL NCCL_P2P_DISABLE: NCCL environment: {line} (NCCL reads 1: strtoll base 0)" in out


@pytest.mark.parametrize("line", [
    "NCCL_IB_DISABLE=0x1", "NCCL_IB_DISABLE=2", "NCCL_SHM_DISABLE= 1", "NCCL_NVLS_ENABLE=false",
    "NCCL_NVLS_ENABLE=0x0", "NCCL_MAX_NCHANNELS=001", "NCCL_P2P_LEVEL=0x0", "NCCL_P2P_LEVEL=00",
    "NCCL_NET_GDR_LEVEL=0", "CUDA_LAUNCH_BLOCKING=0x1", "NCCL_DEBUG=Trace"])
def test_values_nccl_reads_as_harmful(line):
    assert not env.judge(env.parse(line), {})[0].passed


@pytest.mark.parametrize("line", [
    "NCCL_P2P_DISABLE=0x0", "NCCL_P2P_DISABLE=2", "NCCL_P2P_DISABLE=08", "NCCL_P2P_DISABLE=true",
    "NCCL_IB_DISABLE=0 # was 1", "NCCL_NVLS_ENABLE=", "NCCL_NVLS_ENABLE=1", "NCCL_P2P_LEVEL=loc",
    "NCCL_P2P_LEVEL=LOC # comment", "NCCL_P2P_LEVEL=1"])
def test_values_nccl_reads_as_harmless(line):
    """NCCL compares level names case-sensitively and ignores what it does not know (paths.cc ncclGetLevel);
    an empty integer keeps the default (param.cc ncclLoadParam)."""
    assert all(v.passed for v in env.judge(env.parse(line), {}))


STRTOLL_CASES = ["1", "0x1", "0X1f", "01", "017", "08", "0x", "0xg", "1 # comment", "  7", "+3", "-1", "1e3",
                 "true", "", "  ", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0x7fffffffffffffff"]


@pytest.mark.parametrize("text", STRTOLL_CASES)
def test_c_strtol_matches_the_c_library(text):
    """c_strtol against this machine's libc strtoll(text, NULL, 0): ERANGE is None (NCCL keeps its default)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.strtoll.restype = ctypes.c_longlong
    libc.strtoll.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    ctypes.set_errno(0)
    value = libc.strtoll(text.encode(), None, 0)
    expected = None if ctypes.get_errno() else value
    assert env.c_strtol(text) == expected


def test_a_log_with_one_assignment_is_not_env_output():
    with pytest.raises(ProbeParseError, match="line 1"):
        env.parse("# nThread 1 nGpus 1\n#  Rank  0 Group  0 Pid 1 on host device  0\nNCCL_P2P_DISABLE=1\n")
