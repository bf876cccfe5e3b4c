"""NCCL's own errors in an nccl-tests run fail it, whatever its table says: the `# error: <NCCL's last error>`
line nccl-tests prints after its footer (NVIDIA/nccl-tests src/util.cu writeErrors; `errors` in -J JSON),
and NCCL WARN lines between the rows. Offline (`clustercheck probe nccl-tests`, the real CLI) and in a run
(`measure: nccl_tests`), on the real two-node H100 capture (tests/fixtures/tool-outputs, source on line 1),
edited as a failed run prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clustercheck.cli import main
from clustercheck.kinds.base import Answers, Rules
from clustercheck.suite.load import load_suite
from evidence import TOOLS
from nccl_standin import asked, one_node
from test_toolout_nccl_tests import _json_doc

H100 = TOOLS / "nccl-tests" / "allreduce-h100-2node-16rank-mpirun.txt"
COMPLETION = ("NET/IB : Got completion from peer 10.0.0.2<40915> with status=12 opcode=1 len=0 vendor err 129 "
              "(Send)")
LAST_ERROR = f"# error: {COMPLETION} localGid ::ffff:10.0.0.1 remoteGidsfe80::"
WARN = f"ztan-mig-gq73:1234:5678 [3] transport/net_ib.cc:1696 NCCL WARN {COMPLETION}"
# RCCL's init notice (ROCm/ROCm #5656, tests/fixtures/nccl-debug/rccl-5656-r9700-numa-balancing-warn.txt):
# a host setting amd-host judges, the one warning fabric/transport.py tolerates
NUMA = ('NUMA auto balancing enabled which can lead to variability in the RCCL performance! Disable by '
        '"sudo sysctl kernel.numa_balancing=0"')
FLOOR = ("--platform", "h100-sxm-8x", "--expect", "fabric_gbps=2900")


def edited(tmp_path: Path, appended: str = "", before_footer: str = "") -> Path:
    """The capture with a line after its footer (where nccl-tests prints `# error:`), or one before it."""
    text = H100.read_text().rstrip("\n")
    if before_footer:
        assert text.count("# Out of bounds values") == 1
        text = text.replace("# Out of bounds values", f"{before_footer}\n# Out of bounds values")
    path = tmp_path / "run.txt"
    path.write_text(text + "\n" + (f"{appended}\n" if appended else ""))
    return path


def probe(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[str]]:
    code = main(["probe", "nccl-tests", "--input", str(path), *FLOOR])
    return code, capsys.readouterr().out.splitlines()


def test_the_capture_as_printed_passes(capsys):
    code, lines = probe(capsys, H100)
    assert code == 0 and not [x for x in lines if "NCCL errors" in x], lines


def test_ncclgetlasterror_after_the_footer_fails_quoting_it(capsys, tmp_path):
    code, lines = probe(capsys, edited(tmp_path, LAST_ERROR))
    assert code == 1, lines
    failed = [x for x in lines if x.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].startswith("FAIL all_reduce_perf: NCCL errors: nccl-tests printed NCCL's "
                                                     "last error after its footer"), lines
    assert f'"{LAST_ERROR.removeprefix("# error: ")}"' in failed[0]


def test_an_nccl_warn_between_the_rows_fails_naming_host_gpu_and_line(capsys, tmp_path):
    path = edited(tmp_path, before_footer=WARN)
    at = path.read_text().split("\n").index(WARN) + 1
    code, lines = probe(capsys, path)
    assert code == 1, lines
    failed = [x for x in lines if x.startswith("FAIL")]
    assert len(failed) == 1, lines
    assert failed[0].startswith(f'FAIL ztan-mig-gq73: NCCL errors: NCCL WARN on ztan-mig-gq73 GPU [3] (line {at}): '
                                f'"{COMPLETION}"'), failed


def test_rccls_numa_notice_is_tolerated_as_the_transport_module_tolerates_it(capsys, tmp_path):
    code, lines = probe(capsys, edited(tmp_path, f"# error: {NUMA}"))
    assert code == 0 and not [x for x in lines if "NCCL errors" in x], lines


def test_the_json_outputs_errors_fail_quoting_the_first(capsys, tmp_path):
    doc = _json_doc()
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    code, lines = probe(capsys, path)
    assert not [x for x in lines if "NCCL errors" in x], lines   # errors: [] passes nothing by itself
    path.write_text(json.dumps({**doc, "errors": [COMPLETION]}))
    code, lines = probe(capsys, path)
    assert code == 1 and [x for x in lines if x.startswith("FAIL all_reduce_perf: NCCL errors:") and
                          f'"{COMPLETION}"' in x], lines


# -- measure: nccl_tests judges the same text alike ------------------------------------------------------

def _judge(tmp_path: Path, stdout: str) -> list[Any]:
    from clustercheck.kinds import KINDS

    suite = tmp_path / "s.yaml"
    suite.write_text("checks:\n  - id: x\n    measure: nccl_tests\n    params: {check: 1}\n")
    check = load_suite(suite).checks[0]
    stdout = one_node(stdout)  # the capture as this node's run of what it asked (tests/nccl_standin.py)
    result = {"host": "node7", "binary": "all_reduce_perf", "argv": asked(stdout), "outcome": "ran", "returncode": 0,
              "timed_out": False, "timeout": 54.0, "seconds": 1.0, "stdout": stdout, "stdout_bytes": len(stdout),
              "truncated": False, "stderr_tail": ""}
    _, verdicts = KINDS["nccl_tests"].judge(Answers(check, [result, {}], [{"host": "node7"}] * 2, "gloo"), Rules({}))
    return verdicts


def _printed(path: Path) -> str:
    return "\n".join(path.read_text().split("\n")[2:])   # as the tool printed it: no source note


def test_a_run_whose_nccl_tests_printed_an_error_or_a_warn_fails(tmp_path):
    assert not [v for v in _judge(tmp_path, _printed(H100)) if v.metric == "NCCL errors"]
    for edit, subject, quoted in (({"appended": LAST_ERROR}, "all_reduce_perf", LAST_ERROR.removeprefix("# error: ")),
                                  ({"before_footer": WARN}, "ztan-mig-gq73", COMPLETION)):
        failed = [v for v in _judge(tmp_path, _printed(edited(tmp_path, **edit))) if not v.passed]
        assert [(v.metric, v.subject) for v in failed] == [("NCCL errors", subject)], failed
        assert f'"{quoted}"' in (failed[0].detail or "")


def test_a_warn_that_nccl_tests_repeats_in_its_error_line_is_one_failure_keeping_both_words(capsys, tmp_path):
    # NCCL's last error (ncclGetLastError, nccl-tests' `# error:`) is its last WARN's message: one fault printed
    # twice gave two FAIL lines. The `# error:` line here says more than the WARN (its GIDs): those words stay
    path = edited(tmp_path, appended=LAST_ERROR, before_footer=WARN)
    printed = _printed(path)  # edited() writes one file: the run below judges this text
    code, lines = probe(capsys, path)
    failed = [x for x in lines if x.startswith("FAIL")]
    assert code == 1 and len(failed) == 1, failed   # two before: the WARN's and all_reduce_perf's
    assert failed[0].startswith(f'FAIL ztan-mig-gq73: NCCL errors: NCCL WARN on ztan-mig-gq73 GPU [3]'), failed
    assert failed[0].endswith(f'nccl-tests printed it again after its footer (# error): '
                              f'"{LAST_ERROR.removeprefix("# error: ")}"'), failed
    same = edited(tmp_path, appended=f"# error: {COMPLETION}", before_footer=WARN)  # the very words: said once
    failed = [x for x in probe(capsys, same)[1] if x.startswith("FAIL")]
    assert len(failed) == 1 and failed[0].count(COMPLETION) == 1 and failed[0].endswith("(# error)"), failed
    other = edited(tmp_path, appended="# error: Cuda failure 'out of memory'", before_footer=WARN)  # two faults
    assert len([x for x in probe(capsys, other)[1] if x.startswith("FAIL")]) == 2
    run = [v for v in _judge(tmp_path, printed) if not v.passed]   # a run judges the same text alike
    assert [(v.metric, v.subject) for v in run] == [("NCCL errors", "ztan-mig-gq73")], run
