"""`clustercheck platforms`: every threshold profile on the search path in one line each (name, GPUs,
where it came from), and `platforms show P` for one profile in full: detection, hardware, the spec values
its limits use with their sources, expectations and every limit resolved."""

from __future__ import annotations

from typing import Any

from clustercheck.judging.profiles import SearchPath
from clustercheck.judging.thresholds import load_profile
from clustercheck.paths import display


def list_lines(search: SearchPath) -> list[str]:
    rows = []
    for path in search.files().values():
        profile = load_profile(path, display(path))
        gpus = profile.detect.get("gpu_count")
        rows.append((profile.name, "-" if gpus is None else f"{gpus} GPU(s)" if gpus else "no GPU",
                     search.origin(path), profile.description))
    widths = [max(len(r[i]) for r in rows) for i in range(3)] if rows else [0, 0, 0]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[3] for r in rows]
    from clustercheck.judging.derive import known_models

    models = ", ".join(m.slug for m in known_models())
    # the models on a line of their own: one per memory variant (a100-sxm, a100-sxm-80gb) keeps the list growing
    lines.append("derived: any GPU count of a known model, e.g. h100-sxm-4x; used when no profile above matches, or "
                 "with --platform NAME")
    lines.append(f"derived: known models: {models}")
    lines.append("details, limits and sources of one: clustercheck platforms show NAME")
    return lines


def show_lines(search: SearchPath, name: str) -> list[str]:
    profile = search.load(name)
    path = search.files().get(name)
    lines = [f"{profile.name}: {profile.description} ({profile.file}"
             + (f", {search.origin(path)})" if path is not None else ", derived)")]
    if profile.detect:
        lines.append("  detect: " + ", ".join(f"{k}={_show(v)}" for k, v in profile.detect.items()))
    if profile.hardware:
        lines.append("  hardware: " + ", ".join(f"{k}={v}" for k, v in profile.hardware.items()))
        lines += _spec_lines(profile.hardware, indent=4)
    if profile.expect:
        lines.append("  expect (probes): " + ", ".join(f"{k}={v}" for k, v in profile.expect.items()))
    rules = [(f"{check}.{metric}", limit) for check, limits in profile.limits.items() for metric, limit in limits.items()]
    for kind, default in profile.defaults.items():  # any check of the kind that checks: does not name
        when = f" [{default.describe_when()}]" if default.describe_when() else ""
        rules += [(f"defaults.{kind}.{metric}{when}", limit) for metric, limit in default.limits.items()]
    for rule, limit in rules:
        lines.append(f"  {rule} {limit.describe()}  = {limit.expression!r} ({limit.origin})")
        lines += [f"      {src}" for src in limit.spec_sources]
        if limit.source:
            lines.append(f"      source: {limit.source}")
    lines += _counter_lines(profile.counters)
    from clustercheck.judging.fabric import FabricRule

    fabric = profile.fabric or FabricRule()  # multi-node busbw: a fraction of the nodes' line rate
    lines.append(f"  fabric (multi-node) {fabric.describe()} ({fabric.origin})")
    lines.append(f"      source: {fabric.source}")
    return lines


def _counter_lines(counters: dict[str, Any]) -> list[str]:
    """The counter allowances in force: the profile's `counters:` over the built-in ones ({}: those alone)."""
    from clustercheck.counters.allowances import DEFAULTS, NONE

    lines = ["  counters (the most each may rise during one check; the longest dotted prefix names it):"]
    for name, allowance in sorted((counters or DEFAULTS).items()):
        amount = f"{allowance.amount:g}/min" if allowance.per_minute else f"{allowance.amount:g}"
        lines.append(f"    {name} <= {amount} ({allowance.origin})")
        lines.append(f"        source: {allowance.source}")
    lines.append(f"    any other error counter <= 0 ({NONE.origin})")
    return lines


def _show(value: object) -> str:
    if isinstance(value, tuple):  # PCI device ids
        return "[" + ", ".join(f"0x{v:04x}" for v in value) + "]"
    return str(value)


def _spec_lines(hardware: dict[str, str], indent: int) -> list[str]:
    """Every spec value a profile's hardware roles point at, with unit, then its sources once each."""
    from clustercheck.judging.specs import SPECS

    lines = []
    for role, spec in hardware.items():
        values = ", ".join(f"{f} {v.value:g} {v.unit}" for f, v in SPECS[spec].items())
        lines.append(f"{'':<{indent}}spec.{role} = {spec}: {values}")
        lines += [f"{'':<{indent + 4}}source: {source}" for source in dict.fromkeys(v.source for v in SPECS[spec].values())]
    return lines
