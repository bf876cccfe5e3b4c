"""One exit-code table for every subcommand (run, report, compare, probe, platforms, resume, sign, verify)
and for a plain `pytest` run of suites. Rows follow pytest's own codes where they mean the same thing, so a
CI job that reads pytest's codes reads ours. A gate is judged by its worst case: INCOMPLETE before FAILED before
ERROR before NOTHING before PASSED."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    PASSED = 0      # every item that applied passed (probe: every verdict passed)
    FAILED = 1      # the hardware missed a limit or an expectation; compare: a metric regressed
    INCOMPLETE = 2  # the run did not finish (SIGINT/SIGTERM, killed, stopped early): nothing is cleared
    ERROR = 3       # the harness could not measure something (a rank or tool failed); no failure found
    BAD_INPUT = 4   # usage or input error: arguments, suite, profile, baseline or record file, --out
    NOTHING = 5     # nothing to judge: nothing collected, every item skipped, nothing compared
    NOT_VERIFIED = 6  # verify: the evidence does not prove what it says (never a verdict on the hardware)


MEANING = {
    Exit.PASSED: "passed: every item that applied passed",
    Exit.FAILED: "failed: the hardware missed a limit or an expectation (compare: a regression)",
    Exit.INCOMPLETE: "INCOMPLETE: the run did not finish (interrupted, killed, stopped early)",
    Exit.ERROR: "harness error: something could not be measured, and nothing failed",
    Exit.BAD_INPUT: "usage or bad input: arguments, suite, profile, baseline, record file or key",
    Exit.NOTHING: "nothing to judge: nothing collected, every item skipped, or nothing compared",
    Exit.NOT_VERIFIED: "verify: not verified: the evidence does not prove what it says (a bad signature, a changed, "
                       "missing or added file, a verdict that does not follow from the record, an unsigned run)",
}

_BY_VERDICT = {"PASS": Exit.PASSED, "FAIL": Exit.FAILED, "INCOMPLETE": Exit.INCOMPLETE, "ERROR": Exit.ERROR,
               "SKIPPED": Exit.NOTHING}


SEVERITY = (Exit.INCOMPLETE, Exit.FAILED, Exit.ERROR, Exit.NOTHING, Exit.PASSED)  # the worst first


def worst(*codes: Exit) -> Exit:
    """The gravest of `codes` by SEVERITY (a gate is judged by its worst case)."""
    return min(codes, key=SEVERITY.index)


def for_verdict(verdict: str) -> Exit:
    """The code of a run's overall verdict (report.status.run_status)."""
    return _BY_VERDICT[verdict]


def table() -> str:
    """The table as `--help` prints it."""
    return "\n".join(f"  {int(code)}  {MEANING[code]}" for code in Exit)
