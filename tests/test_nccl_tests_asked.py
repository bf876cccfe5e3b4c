"""`measure: nccl_tests` judges only the run it asked for (kinds/nccl_tests.py not_asked): a table of
other ranks, other hosts, another sweep, type or reduction than the rank's argv (-g, -b -e -f, -d, -o) is
an error naming the node, never judged as the node's own; nccl-tests' own `Reducing maxBytes` cut is kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clustercheck.errors import HarnessError
from clustercheck.kinds import KINDS
from clustercheck.kinds.base import Answers, Rules
from clustercheck.suite.load import load_suite
from nccl_standin import asked, one_node

CAPTURE = Path(__file__).parent / "fixtures" / "tool-outputs" / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"
FOREIGN = "\n".join(CAPTURE.read_text().split("\n")[2:])   # 16 ranks, one per process, on two other hosts
OURS = one_node(FOREIGN)                                    # the same rows as one process over -g 16 on node7


def _judge(tmp_path: Path, stdout: str, argv: list[str], **over: Any) -> list[Any]:
    suite = tmp_path / "s.yaml"
    suite.write_text("checks:\n  - id: x\n    measure: nccl_tests\n")
    check = load_suite(suite).checks[0]
    result = {"host": "node7", "binary": "all_reduce_perf", "argv": argv, "outcome": "ran", "returncode": 0,
              "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout, "stdout_bytes": len(stdout),
              "truncated": False, "stderr_tail": "", **over}
    return KINDS["nccl_tests"].judge(Answers(check, [result, {}], [{"host": "node7"}] * 2, "gloo"), Rules({}))[1]


def _flag(argv: list[str], flag: str, value: str) -> list[str]:
    at = argv.index(flag)
    return argv[:at + 1] + [value] + argv[at + 2:]


def test_a_capture_of_16_ranks_on_two_other_hosts_is_no_run_of_g_1_on_this_node(tmp_path: Path) -> None:
    argv = _flag(asked(OURS), "-g", "1")
    with pytest.raises(HarnessError) as err:
        _judge(tmp_path, FOREIGN, argv)
    said = str(err.value)
    assert said.startswith("all_reduce_perf on node7 printed a table that is not the run clustercheck asked for")
    assert "Rank lines on ztan-mig-235z, ztan-mig-gq73, the check ran on node7" in said
    assert "Rank lines of 16 processes, the check started one" in said
    with pytest.raises(HarnessError, match="Rank lines of 16 processes"):   # mpirun -np 16 on this very node
        _judge(tmp_path, FOREIGN.replace("ztan-mig-235z", "node7").replace("ztan-mig-gq73", "node7"), argv)
    with pytest.raises(HarnessError, match="header nThread 1 nGpus 16, asked one process with -g 1"):
        _judge(tmp_path, OURS, argv)
    assert all(v.passed for v in _judge(tmp_path, OURS, asked(OURS)))   # the matching run is judged, and passes


@pytest.mark.parametrize("flag, value, said", [
    ("-e", "134217728", "maxBytes 8589934592 step 2(factor), asked -b 8 -e 134217728 -f 2"),
    ("-b", "1024", "header minBytes 8 maxBytes 8589934592"),
    ("-f", "4", "asked -b 8 -e 8589934592 -f 4"),
    ("-d", "bfloat16", "type float in its rows, asked -d bfloat16"),
    ("-o", "max", "reduction sum in its rows, asked -o max"),
])
def test_another_sweep_type_or_reduction_than_asked_is_an_error(tmp_path: Path, flag: str, value: str,
                                                                said: str) -> None:
    with pytest.raises(HarnessError, match="not the run clustercheck asked for") as err:
        _judge(tmp_path, OURS, _flag(asked(OURS), flag, value))
    assert said in str(err.value)


def test_the_tools_own_reducing_maxbytes_is_kept_and_one_above_the_header_is_not(tmp_path: Path) -> None:
    lines = OURS.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("# nThread"))
    cut = lines[:at + 1] + ["#", "# Reducing maxBytes to 4294967296 due to memory limitation"] + lines[at + 1:]
    text = "\n".join(line for line in cut if not line.lstrip().startswith("8589934592"))
    verdicts = _judge(tmp_path, text, asked(OURS))    # -e 8 GiB asked, the tool cut to 4 GiB: its own note
    assert all(v.passed for v in verdicts), [v.detail for v in verdicts if not v.passed]
    above = text.replace("Reducing maxBytes to 4294967296", "Reducing maxBytes to 17179869184")
    with pytest.raises(HarnessError, match="'Reducing maxBytes to 17179869184' above the header's 8589934592"):
        _judge(tmp_path, above, asked(OURS))


def test_the_hosts_own_name_matches_where_the_node_is_named_otherwise(tmp_path: Path) -> None:
    ours = one_node(FOREIGN, "gpu-a17")
    assert all(v.passed for v in _judge(tmp_path, ours, asked(ours), hostname="gpu-a17.cluster.example"))
    with pytest.raises(HarnessError, match="Rank lines on gpu-a17, the check ran on node7"):
        _judge(tmp_path, ours, asked(ours))


def test_a_crash_before_the_table_stays_the_runs_failure(tmp_path: Path) -> None:
    head = [line for line in OURS.split("\n") if "Rank" not in line][:4]
    text = "\n".join(head + ["node7: Test NCCL failure common.cu:1058 'unhandled system error'"])
    run = [v for v in _judge(tmp_path, text, asked(OURS), returncode=1) if v.metric == "run"]
    assert [v.passed for v in run] == [False] and "Test NCCL failure" in str(run[0].detail)
