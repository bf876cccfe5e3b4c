"""The footer nccl-tests prints after its table, and the rule both its readers apply to it.

src/util.cu (src/common.cu before 2025) ends a run with `# Out of bounds values : N OK|FAILED` (N results
outside the data check's tolerance, FAILED exactly when N > 0) and `# Avg bus bandwidth : X [OK|FAILED]`;
`-J FILE.json` writes the same as `out_of_bounds {count, okay}` and `average_bus_bandwidth`. The text
reader (`nccl_tests`) and the JSON reader (`nccl_tests_json`) judge the out-of-bounds summary by one rule,
`bounds_failure`, so a run one of them fails the other fails too.
"""

from __future__ import annotations

import re

from clustercheck.toolout import number

OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d{1,20})\s*(OK|FAILED)?")
# The value optional: an Avg line whose value is gone is a broken footer, not a comment to pass over.
AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*(?::\s*(\S*)\s*(OK|FAILED)?)?")


def bounds_failure(count: int, okay: bool | None) -> str | None:
    """What fails an out-of-bounds summary (`okay`: the text's OK/FAILED word or the JSON's okay; None when
    the text prints no word): a count below 0 is no summary, and FAILED or a count above 0 is the tool's
    own data check failing (it writes the two together), whatever the table's rows say. None when clean."""
    if count < 0:
        return f"count {count} below 0, no count nccl-tests writes"
    if okay is False or count > 0:
        return (f"a failed out-of-bounds check: {count} result(s) outside nccl-tests' tolerance"
                f"{' (yet printed OK)' if okay is True else ''}")
    return None


def avg_value(token: str) -> float | str:
    """The `Avg bus bandwidth` value (nccl-tests prints it with %g), or why it is none: anything but a finite
    number >= 0 (nan, N/A, a garbled or missing value) is no bandwidth the tool measured."""
    try:
        value = number(token)
    except ValueError as exc:
        return f"Avg bus bandwidth {exc}"
    if value is None or value < 0:
        return f"Avg bus bandwidth {token!r} {'is negative' if value is not None else 'is no value'}"
    return value
