"""What every probe is made of: the `Probe` entry a probe module defines, its verdicts and outcome, the
two exceptions a probe raises (unreadable text, absent tool or hardware) and the line cleaning every
parser shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping


class ProbeParseError(ValueError):
    """The text is not what the probe reads; the message says what was expected."""


class ProbeSkip(Exception):
    """The tool or hardware the probe needs is absent here; the message is the reason."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "not applicable"


@dataclass(frozen=True)
class ProbeVerdict:
    subject: str          # what was judged: a bridge BDF "0000:02:08.0", "GPU3", "mlx5_0/1", "NCCL_P2P_DISABLE"
    what: str             # the property: "ACS redirect", "link width", "active NVLinks"
    passed: bool
    detail: str = ""      # one line a person can act on
    measured: object = None
    expected: object = None
    judged: bool = True   # False: the evidence cannot say (passed is then False too): "not judged: <why>"

    def line(self) -> str:
        return f"{self.subject}: {self.what}: {self.detail}" if self.detail else f"{self.subject}: {self.what}"


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    input_help: str       # what --input FILE must hold
    scope: str            # "node" or "gpu": what the verdicts are about
    parse: Callable[[str], Any]
    collect: Callable[[], Any]
    judge: Callable[[Any, Mapping[str, Any]], list[ProbeVerdict]]
    expect_keys: tuple[str, ...] = ()
    by_index: bool = False  # subjects name GPUs by nvidia-smi index only ("GPU3"): live runs add the bus id


@dataclass(frozen=True)
class ProbeOutcome:
    name: str
    outcome: str          # passed | failed | skipped | error
    verdicts: tuple[ProbeVerdict, ...] = ()
    reason: str = ""      # for skipped and error

    @property
    def failures(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed and v.judged)

    @property
    def not_judged(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.judged)


def not_judged(subject: str, what: str, why: str, measured: object = None) -> ProbeVerdict:
    """A property the evidence cannot decide: never a pass (the probe's outcome is then an error)."""
    return ProbeVerdict(subject, what, False, f"not judged: {why}", measured, judged=False)


def outcome_of(name: str, verdicts: tuple[ProbeVerdict, ...]) -> ProbeOutcome:
    """failed when a judged verdict failed; else error when one could not be judged; else passed."""
    result = ProbeOutcome(name, "passed", verdicts)
    if result.failures:
        return ProbeOutcome(name, "failed", verdicts)
    if result.not_judged:
        return ProbeOutcome(name, "error", verdicts, "; ".join(v.line() for v in result.not_judged))
    return result
