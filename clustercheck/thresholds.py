"""Platform threshold profiles (`thresholds/<platform>.yaml`): limits with direction, unit and provenance."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from clustercheck import specs, units, yamlfile
from clustercheck.paths import display
from clustercheck.units import fmt
from clustercheck.errors import UserError, show
from clustercheck.expr import ExprError, Quantity, parse_limit
from clustercheck.expect import check_expect
from clustercheck.schema import Fields, between, one_of


@dataclass(frozen=True)
class Limit:
    """One limit on one metric of one check, resolved to a number in `unit`."""

    check: str
    metric: str
    op: str
    value: float
    unit: str
    expression: str
    source: str
    origin: str  # file:line of the limit
    spec_sources: tuple[str, ...] = ()

    def passes(self, measured: float) -> bool:
        if math.isnan(measured):
            return False
        return {">=": measured >= self.value, "<=": measured <= self.value, ">": measured > self.value,
                "<": measured < self.value, "==": measured == self.value}[self.op]

    def margin(self, measured: float) -> float:
        """Signed distance to the limit, relative to it when it is not 0; positive means inside."""
        diff = measured - self.value if self.op in (">=", ">") else self.value - measured
        if self.op == "==":
            diff = -abs(measured - self.value)
        return (diff / abs(self.value) if self.value else diff) + 0.0  # + 0.0 turns -0.0 into 0.0

    def describe(self) -> str:
        return f"{self.op} {fmt(self.value)} {self.unit}"

    def provenance(self) -> str:
        text = f"{self.expression!r} ({self.origin})"
        if self.source:
            text += f"; {self.source}"
        return text


@dataclass(frozen=True)
class Profile:
    name: str
    file: str
    description: str
    detect: dict[str, object]
    hardware: dict[str, str]
    limits: dict[str, dict[str, Limit]] = field(default_factory=dict)
    expect: dict[str, object] = field(default_factory=dict)  # what probes judge against (probes.EXPECT_KEYS)

    def limits_for(self, check_id: str) -> dict[str, Limit] | None:
        return self.limits.get(check_id)


_DETECT_KEYS = ("gpu_count", "pci_device_ids", "nvlinks_per_gpu")
_DETECT_RANGES = {"gpu_count": (0, 1024), "nvlinks_per_gpu": (0, 64)}  # GPUs per node as --ranks; NVLink 5: 18


def load_profile(path: Path, display: str | None = None) -> Profile:
    name = display or str(path)
    doc = yamlfile.load(path, name)
    top = Fields(doc, name, "")
    platform = top.get("platform", str)
    if platform != path.stem:
        raise top.error("platform", f"must equal the file name {path.stem!r}, got {show(platform)}")
    description = top.get("description", str, "")
    detect_f = Fields(top.get("detect", dict), name, "detect", top.line_of("detect"))
    detect: dict[str, object] = {}
    for key in _DETECT_KEYS:
        if key == "pci_device_ids":
            ids = detect_f.get(key, list, None)
            if ids is not None:
                if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= 0xFFFF
                                      for i in ids):
                    raise detect_f.error(key, "expected a list of PCI device ids (16 bits) such as [0x2330]")
                detect[key] = tuple(sorted(ids))
        else:
            value = detect_f.get(key, int, None, check=between(*_DETECT_RANGES[key]))
            if value is not None:
                detect[key] = value
    detect_f.done()
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
        metrics_raw = checks_f.get(check_id, dict)
        metrics_f = Fields(metrics_raw, name, f"checks.{check_id}", checks_f.line_of(check_id))
        limits[check_id] = {}
        for metric in list(metrics_raw):
            limits[check_id][metric] = _limit(metrics_f, check_id, metric, name, resolve)
        metrics_f.done()
    checks_f.done()
    expect_raw = top.get("expect", dict, None)
    expect = {} if expect_raw is None else check_expect(expect_raw, name, "expect", top.line_of("expect"))
    top.done()
    return Profile(platform, name, description, detect, hardware, limits, expect)


def _limit(parent: Fields, check_id: str, metric: str, file: str, resolve: object) -> Limit:
    f = Fields(parent.get(metric, dict), file, parent.key_path(metric), parent.line_of(metric))
    expression = f.get("limit", str)
    unit = f.get("unit", str, check=one_of(*units.UNITS))
    source = f.get("source", str, "")
    f.done()
    try:
        parsed = parse_limit(expression, resolve)  # type: ignore[arg-type]
        value = units.convert(parsed.value, parsed.unit, unit) if parsed.unit else parsed.value
        if not math.isfinite(value):
            raise ExprError(f"the limit is not a finite number in {unit}")
    except (ExprError, ValueError) as exc:
        raise f.error("limit", f"bad threshold expression {show(expression, 200)}: {exc}") from None
    return Limit(check_id, metric, parsed.op, value, unit, expression, source,
                 f"{file}:{f.line_of('limit')}", parsed.sources)


def profile_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def load_named(directory: Path, platform: str) -> Profile:
    path = directory / f"{platform}.yaml"
    if not path.is_file():
        known = ", ".join(profile_names(directory)) or "none"
        raise UserError(f"no threshold profile {platform!r} in {directory} (known: {known})")
    return load_profile(path, display(path))


