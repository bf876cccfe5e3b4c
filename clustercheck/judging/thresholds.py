"""Platform threshold profiles (`thresholds/<platform>.yaml`): limits with direction, unit and provenance."""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from clustercheck import units, yamlfile
from clustercheck.judging import specs
from clustercheck.units import fmt
from clustercheck.errors import show
from clustercheck.judging.limits import Limit
from clustercheck.judging.expr import ExprError, Quantity, parse_limit
from clustercheck.judging.expect import check_expect
from clustercheck.judging.fabric import FabricRule, parse_rule
from clustercheck.schema import Fields, between, one_of


@dataclass(frozen=True)
class Default:
    """The limits of `defaults.<kind>`: they judge any check of that measure kind that the profile does not
    name under `checks:`, when the check fits `when:` (a dtype; a judged size large enough to mean it)."""

    kind: str
    limits: dict[str, Limit]
    dtypes: tuple[str, ...] = ()  # the check's params.dtype must be one of these; () any
    min_size: int = 0  # bytes the check is judged at (params.judge_at, else size, else max_bytes) at least; 0 any
    line: int = 0

    def misfit(self, params: Mapping[str, Any]) -> str | None:
        """Why these limits do not apply to a check with `params`; None when they do."""
        dtype = params.get("dtype")
        if self.dtypes and dtype not in self.dtypes:
            return f"applies to dtype {', '.join(self.dtypes)}, not {dtype or 'a check without one'}"
        size = params.get("judge_at", params.get("size", params.get("max_bytes")))  # nccl_tests: its largest size
        if self.min_size and not (isinstance(size, int) and size >= self.min_size):
            judged = "a check without a size" if size is None else f"{units.format_size(size)}"
            return f"applies to checks judged at {units.format_size(self.min_size)} or more, not {judged}"
        return None

    def describe_when(self) -> str:
        parts = ([f"dtype {'/'.join(self.dtypes)}"] if self.dtypes else []) + \
            ([f"judged at >= {units.format_size(self.min_size)}"] if self.min_size else [])
        return ", ".join(parts)


@dataclass(frozen=True)
class Profile:
    name: str
    file: str
    description: str
    detect: dict[str, object]
    hardware: dict[str, str]
    limits: dict[str, dict[str, Limit]] = field(default_factory=dict)
    expect: dict[str, object] = field(default_factory=dict)  # what probes judge against (judging.expect.EXPECT_KEYS)
    defaults: dict[str, Default] = field(default_factory=dict)  # measure kind -> its limits (defaults:)
    counters: dict[str, Any] = field(default_factory=dict)  # counter -> Allowance (counters:); {}: the built-in ones
    fabric: FabricRule | None = None  # fabric: the multi-node busbw floor (judging/fabric.py); None: the built-in rule
    lines: dict[str, int] = field(default_factory=dict)  # checks.<id> -> its line (a near-miss id is named by it)

    def limits_for(self, check_id: str) -> dict[str, Limit] | None:
        return self.limits.get(check_id)

    def near_miss(self, check_id: str, run_ids: set[str]) -> str | None:
        """The id under checks: that `check_id` nearly is (`allreduce-swep` for `allreduce-sweep`) and that no
        check of the run (`run_ids`) has, or None. A slip is one word of the id misspelt (words split at
        `-_.:`), not another word: `allreduce-ring` beside `allreduce-burn` (difflib's 0.857 over the whole ids)
        is another check, as are a variant extending the id (`allreduce-sweep-2n`) and one differing in digits
        alone (`allreduce-1n` beside `allreduce-2n`), as a profile shared by several suites names them."""
        unnamed = [i for i in self.limits if i not in run_ids]
        words = _WORD.split(check_id)
        for near in difflib.get_close_matches(check_id, unnamed, n=3, cutoff=0.85):
            theirs = _WORD.split(near)
            differ = [(a, b) for a, b in zip(words, theirs) if a != b]
            if len(theirs) != len(words) or len(differ) != 1:
                continue
            (a, b), = differ
            digits = "".join(c for c in a if not c.isdigit()) == "".join(c for c in b if not c.isdigit())
            if not digits and difflib.SequenceMatcher(None, a, b).ratio() >= 0.75:
                return near
        return None


_WORD = re.compile(r"[-_.:]")  # what separates the words of a check id
_DETECT_KEYS = ("gpu_count", "pci_device_ids", "nvlinks_per_gpu")
_DETECT_RANGES = {"gpu_count": (0, 1024), "nvlinks_per_gpu": (0, 64)}  # GPUs per node as --ranks; NVLink 5: 18


def load_profile(path: Path, display: str | None = None) -> Profile:
    """The profile in `path`, parsed once per process while the file stays the same (the command line
    checks every profile before pytest starts, and detection reads them again)."""
    name = display or str(path)
    try:
        st = path.stat()
    except OSError:
        return parse_profile(yamlfile.load(path, name), name, path.stem)  # the loader says what is wrong
    return _parsed(path, name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=128)
def _parsed(path: Path, name: str, mtime_ns: int, size: int) -> Profile:
    return parse_profile(yamlfile.load(path, name), name, path.stem)


def parse_profile(doc: object, name: str, stem: str) -> Profile:
    """A profile from parsed YAML (a file's, or derive.py's text); `stem` is the name `platform:` must have."""
    top = Fields(doc, name, "")
    platform = top.get("platform", str)
    if platform != stem:
        raise top.error("platform", f"must equal the file name {stem!r}, got {show(platform)}")
    description = top.get("description", str, "")
    detect_f = Fields(top.get("detect", dict), name, "detect", top.line_of("detect"))
    detect: dict[str, object] = {}
    for key in _DETECT_KEYS:
        if key == "pci_device_ids":
            ids = detect_f.get(key, list, None, any_number_form=True)  # [0x2330]: hex is the way ids are written
            if ids is not None:
                if not ids or not all(units.is_count(i) and 0 <= i <= 0xFFFF for i in ids):
                    raise detect_f.error(key, "expected a list of PCI device ids (16 bits) such as [0x2330]")
                if len(set(ids)) != len(ids):  # a copy-paste slip that hides the id meant
                    twice = next(i for n, i in enumerate(ids) if i in ids[:n])
                    raise detect_f.error(key, f"lists the device id 0x{twice:04x} twice")
                detect[key] = tuple(sorted(ids))
        else:
            value = detect_f.get(key, int, None, check=between(*_DETECT_RANGES[key]))
            if value is not None:
                detect[key] = value
    detect_f.done()
    _detect_names_hardware(top, detect)
    hw_raw = top.get("hardware", dict, {})
    hw_f = Fields(hw_raw, name, "hardware", top.line_of("hardware"))
    hardware: dict[str, str] = {}
    for role in list(hw_raw):
        hardware[role] = hw_f.get(role, str, check=one_of(*sorted(specs.SPECS)))
    hw_f.done()

    def resolve(spec_name: str, spec_field: str) -> Quantity:
        spec_value = specs.lookup(hardware.get(spec_name, spec_name), spec_field)
        return Quantity(spec_value.value, spec_value.unit,
                        (f"spec.{spec_name}.{spec_field} = {fmt(spec_value.value)} {spec_value.unit}: {spec_value.source}",))

    checks_raw = top.get("checks", dict, {})
    checks_f = Fields(checks_raw, name, "checks", top.line_of("checks"))
    limits: dict[str, dict[str, Limit]] = {}
    for check_id in list(checks_raw):
        metrics_f = Fields(checks_f.get(check_id, dict), name, checks_f.key_path(check_id), checks_f.line_of(check_id))
        if not metrics_f.data:  # an entry of no limit would leave its check judged by nothing but an error
            raise checks_f.error(check_id, "names no metric; e.g. busbw: {limit: \">= 0.6 * spec.nvlink.unidirectional\", "
                                           "unit: GB/s, source: ...}")
        limits[check_id] = {metric: _limit(metrics_f, check_id, metric, resolve) for metric in list(metrics_f.data)}
        metrics_f.done()
    checks_f.done()
    defaults_raw = top.get("defaults", dict, {})
    defaults_f = Fields(defaults_raw, name, "defaults", top.line_of("defaults"))
    defaults = {kind: _default(defaults_f, kind, resolve) for kind in list(defaults_raw)}
    defaults_f.done()
    expect_raw = top.get("expect", dict, None)
    expect = {} if expect_raw is None else check_expect(expect_raw, name, "expect", top.line_of("expect"))
    counters_raw = top.get("counters", dict, None)
    counters: dict[str, Any] = {}
    if counters_raw is not None:  # --counters allowances, checked here so a mistake stops the run at once
        from clustercheck.counters.allowances import parse as parse_allowances

        counters = parse_allowances(counters_raw, name, top.line_of("counters"))
    fabric_raw = top.get("fabric", dict, None)
    fabric = None if fabric_raw is None else parse_rule(fabric_raw, name, top.line_of("fabric"))
    top.done()
    lines = {check_id: checks_f.line_of(check_id) for check_id in limits}
    return Profile(platform, name, description, detect, hardware, limits, expect, defaults, counters, fabric, lines)


def _detect_names_hardware(top: Fields, detect: dict[str, object]) -> None:
    """A detect block must name the hardware: NVLinks alone (or `{}`) would pick the profile on any machine,
    even one without a GPU, over the shipped one, and judge it by the user's limits."""
    if "pci_device_ids" not in detect and "gpu_count" not in detect:
        raise top.error("detect", "names no hardware: give pci_device_ids (the platform's GPUs, e.g. [0x2330]) "
                                  "or gpu_count (0 for a machine without GPUs); nvlinks_per_gpu alone matches "
                                  "any machine")


_DEFAULT_DTYPES = ("auto", *sorted(set(units.CANONICAL_DTYPE.get(d, d) for d in units.DTYPE_BYTES)))


def _default(parent: Fields, kind: str, resolve: Callable[[str, str], Quantity]) -> Default:
    """`defaults.<kind>`: metric -> limit, and an optional `when: {dtype: [...], min_size: 1GiB}`."""
    f = Fields(parent.get(kind, dict), parent.file, parent.key_path(kind), parent.line_of(kind))
    dtypes: tuple[str, ...] = ()
    min_size = 0
    if "when" in f.data:
        w = Fields(f.get("when", dict), f.file, f.key_path("when"), f.line_of("when"))
        raw = w.get("dtype", list, None)
        if raw == []:  # `dtype: []` would read as any dtype: leave the key out for that
            raise w.error("dtype", "an empty list names no dtype; list the dtypes, or leave dtype out for any")
        raw = raw or []
        if not all(isinstance(d, str) and units.CANONICAL_DTYPE.get(d, d) in _DEFAULT_DTYPES for d in raw):
            raise w.error("dtype", f"expected a list of dtypes from {', '.join(_DEFAULT_DTYPES)}, got {show(raw)}")
        dtypes = tuple(dict.fromkeys(units.CANONICAL_DTYPE.get(d, d) for d in raw))
        size = w.get("min_size", (int, str), None)
        if size is not None:
            try:
                min_size = units.parse_size(size)
            except ValueError as exc:
                raise w.error("min_size", str(exc)) from None
        w.done()
    metrics = [m for m in f.data if m != "when"]
    if not metrics:
        raise parent.error(kind, "names no metric; e.g. busbw: {limit: \">= 0.6 * spec.nvlink.unidirectional\", "
                                 "unit: GB/s, source: ...}")
    limits = {metric: _limit(f, "", metric, resolve) for metric in metrics}
    f.done()
    return Default(kind, limits, dtypes, min_size, parent.line_of(kind))


def _vacuous(op: str, value: float, unit: str) -> str | None:
    """Why a limit at 0 on a quantity that is never negative judges nothing (`>= 0` passes a broken link's 0
    GB/s; `< 0` fails everything), or None. A limit that underflows to 0 (`>= 1e-400`) reads the same."""
    family = units.UNITS[unit][0]
    if value != 0 or family not in units.NON_NEGATIVE or op not in (">=", "<"):
        return None
    return (f"a {family} is never negative, so '{op} 0' {'passes' if op == '>=' else 'fails'} every measurement; "
            + ("write a floor above 0" if op == ">=" else "write '<= 0' or '== 0'"))


def _limit(parent: Fields, check_id: str, metric: str, resolve: Callable[[str, str], Quantity]) -> Limit:
    file = parent.file
    key = parent.key_path(metric)
    f = Fields(parent.get(metric, dict), file, key, parent.line_of(metric))
    expression = f.get("limit", str)
    unit = f.get("unit", str, check=one_of(*units.UNITS))
    source = f.get("source", str, "")
    f.done()
    try:
        parsed = parse_limit(expression, resolve)
        if parsed.percent and parsed.unit is None and unit != "ratio":  # in %, '5%' would read as 0.05 %
            raise ExprError(f"a percentage of nothing: it reads as {parsed.value:g} {unit}; write a share of a spec "
                            f"value ('>= 80% * spec.nvlink.unidirectional'), a number in {unit}, or unit: ratio")
        value = units.convert(parsed.value, parsed.unit, unit) if parsed.unit else parsed.value
        if not math.isfinite(value):
            raise ExprError(f"the limit is not a finite number in {unit}")
        problem = units.out_of_domain(value, unit)  # `>= -0.05 GB/s` passes any bandwidth, even a broken one
        if problem or (problem := _vacuous(parsed.op, value, unit)):
            raise ExprError(problem)
    except (ExprError, ValueError) as exc:
        raise f.error("limit", f"bad threshold expression {show(expression, 200)}: {exc}") from None
    line = f.line_of("limit")
    return Limit(check_id, metric, parsed.op, value, unit, expression, source, f"{file}:{line} {key}",
                 parsed.sources, file, line, key)
