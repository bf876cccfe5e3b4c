"""What the native-tool kinds share (`measure: nccl_tests`, `measure: nvbandwidth`): the node's first rank
ran the tool (clustercheck/measure/native.py); its output is read with the same parsers as the offline probes
(clustercheck/toolout/) and judged like a built-in measurement: the profile's limits through
`judging.measurement.evaluate`, plus built-in verdicts a profile cannot relax.

Outcomes (DESIGN: failed = the hardware, error = the harness):
- **skipped**: the binary is not on the rank's PATH on that node (nothing about the node is known);
- **error**: the binary is there but cannot be started, or it printed nothing the parser recognises as
  the tool's output (a loader failure, a bad install, an argument the build does not know), or more
  output than clustercheck keeps: none of these says anything about the GPUs or the fabric;
- **failed**: the tool ran and its own output shows a crash (the parser's failure line: `Test NCCL
  failure`, nvbandwidth's pattern check, `Aborted`), a cut-off table, a timeout, a non-zero exit, any
  `#wrong` > 0 or out-of-bounds value, or a limit missed. A tool that started, printed its header and
  then crashed on a healthy harness is evidence against the node.

A suite chooses which of a fixed list of tool names runs and with which validated flags; it never
chooses a file. The program is looked up on the PATH of the environment clustercheck runs in (a suite's
`env:` cannot set PATH: docs/security.md), so where the tools live is the operator's business. An
absolute `binary:` path is refused for the same reason a suite cannot set LD_PRELOAD: it would let a
shared suite file pick a program for every node to run.
"""

from __future__ import annotations

import re
import signal
from typing import Any, Callable, Mapping, TypeVar

from clustercheck import units
from clustercheck.errors import HarnessError, Skip, show
from clustercheck.judging.limits import Limit
from clustercheck.judging.measurement import Measurement, evaluate
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.kinds.base import Answers
from clustercheck.schema import Fields
from clustercheck.kinds.base import CheckSpec
from clustercheck.toolout import NotToolOutput

T = TypeVar("T")

BUILT_IN = "built in"
_CORRECT = "correctness is not a threshold a platform may relax"
_RUN_RULE = "a complete run: the tool's whole output, no failure line, exit status 0, within its timeout"


def tool_timeout(check_timeout: float) -> float:
    """The tool must end, and be reported, before the pool gives up on the rank."""
    return max(0.5, min(check_timeout * 0.9, check_timeout - 10.0))


def task_params(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    return {**check.params, "tool_timeout": tool_timeout(check.timeout)}


def zero_limit(check_id: str, metric: str, why: str) -> Limit:
    return Limit(check_id, metric, "==", 0.0, "count", "== 0", f"{_CORRECT}: {why}", BUILT_IN)


# -- what the rank returned -------------------------------------------------------------------------

def result_of(a: Answers) -> dict[str, Any]:
    result = next((r for r in a.per_rank if r.get("binary")), None)
    if result is None:
        raise HarnessError(f"{a.check.id}: no rank of {', '.join(sorted(set(a.hosts)))} ran the tool")
    if result["outcome"] == "missing":
        raise Skip(result["reason"])
    if result["outcome"] != "ran":
        raise HarnessError(result["reason"])
    if result["truncated"]:
        raise HarnessError(f"{result['binary']} on {result['host']} printed {result['stdout_bytes']} bytes, more "
                           f"than clustercheck keeps ({len(result['stdout'].encode())}): not judged on a part")
    return result


def unclean_end(result: Mapping[str, Any]) -> str | None:
    """How the tool ended when that was not a clean exit; None for exit status 0 only (a returncode of None,
    no exit status read, is no clean exit)."""
    rc = result["returncode"]
    if result["timed_out"]:
        return f"stopped after {result['timeout']:g} s (its timeout, 10% or 10 s below the check's)"
    if not units.is_count(rc):
        return f"no exit status ({show(rc, 40)})"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}" if rc else None


def _stderr_line(result: Mapping[str, Any]) -> str:
    lines = [s.strip() for s in result["stderr_tail"].splitlines() if s.strip()]
    return f"; stderr: {lines[-1][:200]}" if lines else ""


def parse_output(parse: Callable[[str], T], result: Mapping[str, Any]) -> T:
    try:
        return parse(result["stdout"])
    except NotToolOutput as exc:
        ended = unclean_end(result) or "exited with status 0"
        raise HarnessError(f"{result['binary']} on {result['host']} {ended} without output clustercheck can read "
                           f"({exc}){_stderr_line(result)}") from None


def run_verdict(check_id: str, result: Mapping[str, Any], failure: str | None, summary: str,
                 exit_hint: str = "") -> Verdict:
    problems = [failure] if failure else []
    ended = unclean_end(result)
    if ended:
        problems.append(ended + ("" if failure else exit_hint + _stderr_line(result)))
    passed = not problems
    detail = "; ".join(problems) if problems else f"{summary}; exit status 0 in {result['seconds']:g} s"
    rule = Expectation(check_id, "run", "a complete run", BUILT_IN, _RUN_RULE)
    return Verdict("run", "complete" if passed else "failed", "", rule, passed, subject=result["binary"],
                   detail=detail)


def judge_limits(m: Measurement, limits: Mapping[str, Limit], complete: bool) -> list[Verdict]:
    """The profile's limits. After a failed run only what it did measure is judged: the run verdict
    already fails the item, and a missing number must not turn that failure into an error."""
    return evaluate(m, {k: v for k, v in limits.items()
                        if complete or k in m.metrics or any(k in s for s in m.subjects.values())})


def program_name(f: Fields, default: str, allowed: re.Pattern[str], what: str) -> str:
    if "binary" in f.data and f.data["binary"] is None:  # `binary:` with no value is a mistake, not the default
        raise f.error("binary", f"no program named (null); give the program's name ({what}) or leave the key out")
    name = f.get("binary", str, default)
    if "/" in name:
        raise f.error("binary", f"{show(name)} is a path; give the program's name ({what}) and put it on the "
                                f"PATH clustercheck runs with: a suite does not choose files to run")
    if not allowed.fullmatch(name):
        raise f.error("binary", f"{show(name)} is not {what}")
    return name
