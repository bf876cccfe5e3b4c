"""What every probe is made of: the `Probe` entry a probe module defines, its verdicts and outcome, the
two exceptions a probe raises (unreadable text, absent tool or hardware) and the line cleaning every
parser shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

from clustercheck.errors import show
from clustercheck.units import is_count


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
    judged: bool = True   # False: nothing was judged (`not_judged`); never a pass, and not a failure either

    def line(self) -> str:
        return f"{self.subject}: {self.what}: {self.detail}" if self.detail else f"{self.subject}: {self.what}"

    @property
    def word(self) -> str:
        """PASS, FAIL or NOT JUDGED: how every reader prints the verdict."""
        return "NOT JUDGED" if not self.judged else "PASS" if self.passed else "FAIL"


def not_judged(subject: str, what: str, why: str, measured: object = None, expected: object = None) -> ProbeVerdict:
    """A verdict that judged nothing: its line says `not judged: <why>`. `passed` is False, so a reader that
    does not know `judged` can never take it for a pass; the outcome counts it apart from failures."""
    return ProbeVerdict(subject, what, False, f"not judged: {why}", measured, expected, judged=False)


def count_of(value: object) -> int | None:
    """A profile's count (`gpu_count`) as a promise: an int, never a bool (`true` is not one GPU)."""
    return value if is_count(value) else None


def gaps(numbers: Collection[int], top: int) -> list[int]:
    """The numbers of 0..top-1 missing from `numbers`: what a listing numbered from 0 (GPUs, links, matrix
    labels) left out. The walk stops at 4 * len + 64, so one stray huge number (GPU 99999999) costs no more
    steps than the listing has lines."""
    have = numbers if isinstance(numbers, (set, frozenset, dict)) else set(numbers)
    return [n for n in range(min(top, 4 * len(have) + 64)) if n not in have]


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
    # a key read whose values are not all judged, with the values that are: amd-smi shows xGMI or not, so of
    # topology.gpu_gpu it judges XGMI alone (NV18, an NVIDIA link word, would be read and never judged)
    takes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def reads(self, key: str) -> bool:
        """Whether judge() reads the expectation `key` ("topology", or one nested key "topology.gpu_nic"). An
        entry of expect_keys names a key with every key nested in it ("topology"), or one nested key alone
        ("topology.gpu_gpu": amd-smi reads no other): a typed --expect judged by nothing must be refused,
        never run and passed (tests/test_probe_expect_keys.py holds each tuple to what its judge reads)."""
        from clustercheck.judging.expect import reads

        return reads(self.expect_keys, key)

    def cannot_judge(self, expect: Mapping[str, Any]) -> str | None:
        """Why an expectation's value is one this probe reads and cannot judge (`takes`), in one line naming the
        key and the values it takes; None when it judges them all. A typed --expect of one is refused (exit 4);
        from a profile, which serves every probe, the probe says `not judged` with it, never a silent pass."""
        for key, allowed in self.takes:
            value: Any = expect
            for part in key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is not None and not (set(value if isinstance(value, list) else [value]) <= set(allowed)
                                          and value != []):
                return f"{key}: probe {self.name} cannot judge {show(value, 40)} (it takes: {', '.join(allowed)})"
        return None


@dataclass(frozen=True)
class ProbeOutcome:
    name: str
    outcome: str          # passed | failed | not judged | skipped | error
    verdicts: tuple[ProbeVerdict, ...] = ()
    reason: str = ""      # for skipped and error

    @property
    def failures(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if v.judged and not v.passed)

    @property
    def unjudged(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.judged)


def outcome_of(name: str, verdicts: tuple[ProbeVerdict, ...]) -> ProbeOutcome:
    """A probe's outcome from its verdicts, judged by the worst case as a gate is: any failure fails; a probe
    whose verdicts all judged nothing is `not judged` (exit 5), never passed; one that judged part and could
    not decide the rest is an error (exit 3) naming what was not judged, as a suite item is (a multi-node
    busbw without a line rate beside a run that passed); only a probe that judged everything passes."""
    if any(v.judged and not v.passed for v in verdicts):
        return ProbeOutcome(name, "failed", verdicts)
    open_ = [v for v in verdicts if not v.judged]
    if open_ and len(open_) == len(verdicts):
        return ProbeOutcome(name, "not judged", verdicts)
    if open_:
        return ProbeOutcome(name, "error", verdicts, "; ".join(v.line() for v in open_))
    return ProbeOutcome(name, "passed", verdicts)
