"""Limit sources a buyer can check: every source in a shipped threshold profile and in the spec table cites a
public document (a URL, a GitHub `owner/repo path`, an `owner/repo #N` issue or PR) or says plainly that the
number is clustercheck's own choice or has no public source. None names a file that is not in the package,
because these strings reach the HTML report, sla.json and `clustercheck platforms show`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import all_limits
from clustercheck.judging import specs
from clustercheck.judging.thresholds import load_profile

ROOT = Path(__file__).resolve().parent.parent


def shipped_profiles() -> list[Path]:
    """The top-level thresholds/ source and any copy carried inside the package."""
    found = set(ROOT.glob("thresholds/*.yaml")) | set((ROOT / "clustercheck").glob("**/thresholds/*.yaml"))
    return sorted(found)


PROFILES = shipped_profiles()

# Paths that exist only in a development checkout or on one machine, never in an installed package.
FORBIDDEN = ("reference/", "seeds/", "measurement.md", "healthchecks.md", "../shared", "/work/", "fixtures/")

PUBLIC = (
    re.compile(r"https?://\S+"),
    # owner/repo followed by a path to a file, e.g. "Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf"
    re.compile(r"\b[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*[ :]+(?:[\w.-]+/)*[\w.-]+\.[A-Za-z]{1,5}\b"),
    # owner/repo with an issue or pull-request number, e.g. "NVIDIA/nccl-tests #212"
    re.compile(r"\b[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*\s+(?:issue\s+|PR\s+)?#\d+"),
    re.compile(r"clustercheck's"),
    re.compile(r"\bno public\b", re.IGNORECASE),
)


def problems(source: str) -> list[str]:
    found = [f"names {bad!r}" for bad in FORBIDDEN if bad in source]
    if not source.strip():
        found.append("is empty")
    elif not any(p.search(source) for p in PUBLIC):
        found.append("cites no URL, owner/repo path or issue, and does not say clustercheck's / no public")
    return found


def test_profiles_are_found():
    names = {p.stem for p in PROFILES}
    assert {"cpu", "h100-sxm-8x", "h200-sxm-8x"} <= names, names


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.stem)
def test_every_limit_source_of_a_shipped_profile_is_public(path):
    profile = load_profile(path)
    assert profile.limits, f"{path.name}: no limits"
    bad = []
    for limit in all_limits(profile):  # checks: and defaults: alike
        for what in problems(limit.source):
            bad.append(f"{limit.origin} source {what}: {limit.source!r}")
        for spec_source in limit.spec_sources:
            for what in problems(spec_source):
                bad.append(f"{limit.origin} spec source {what}: {spec_source!r}")
    assert not bad, f"{path.name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", sorted(specs.SPECS))
def test_every_spec_source_is_public(name):
    bad = [f"{field} {what}: {value.source!r}"
           for field, value in specs.SPECS[name].items() for what in problems(value.source)]
    assert not bad, f"spec {name}:\n" + "\n".join(bad)


@pytest.mark.parametrize("text, ok", [
    ("DCGM minimum 1905000 (https://github.com/NVIDIA/DCGM/blob/master/nvvs/diag-skus.yaml.in)", True),
    ("gates 460 (Azure/azurehpc-health-checks conf/nd96isr_h100_v5.conf)", True),
    ("NVLS peak ~480 (NVIDIA/nccl-tests #212)", True),
    ("clustercheck's floor: half the rate", True),
    ("no public measurement found; half the rate", True),
    ("floor 0.75 of 63 GB/s", False),  # "GB/s" is not an owner/repo
    ("reference/measurement.md 6: floor 430", False),
    ("see seeds/004 (https://example.org)", False),
    ("captured in tests/fixtures/tool-outputs/x.txt (https://example.org)", False),
    ("", False),
])
def test_the_rule_itself(text, ok):
    assert (not problems(text)) is ok, problems(text)
