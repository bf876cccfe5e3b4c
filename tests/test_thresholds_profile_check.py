"""`platforms show P` refuses (exit 4) the profile `run` refuses: a `defaults.<kind>` of no measure kind used to
show as fine (exit 0), and a metric under `checks.<id>` that no kind reports (`bsubw`) was mentioned by
nothing, not even by a run whose suite lacks that check id: it judged nothing, in silence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clustercheck.errors import UserError
from clustercheck.judging.profiles import search_path
from clustercheck.judging.thresholds import load_profile
from clustercheck.run.judge import check_metrics, check_profile
from clustercheck.suite.load import load_suite

LOOSE = '{limit: ">= 0.000001", unit: GB/s, source: loose}'
TYPO_KIND = f"platform: lab\ndetect: {{gpu_count: 0}}\ndefaults:\n  all_reduc:\n    busbw: {LOOSE}\n"
TYPO_METRIC = f"platform: lab\ndetect: {{gpu_count: 0}}\nchecks:\n  allreduce-bf16:\n    bsubw: {LOOSE}\n"


def show(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "lab.yaml").write_text(text)
    return subprocess.run([sys.executable, "-m", "clustercheck", "platforms", "show", "lab", "--thresholds", "th"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize("text, where, hint", [
    (TYPO_KIND, "th/lab.yaml:4: defaults.all_reduc: no measure kind 'all_reduc'", "did you mean 'all_reduce'?"),
    (TYPO_METRIC, "th/lab.yaml:5: checks.allreduce-bf16.bsubw: no measure kind reports a metric 'bsubw'",
     "did you mean 'busbw'?"),
    (f"platform: lab\ndetect: {{gpu_count: 0}}\ndefaults:\n  all_reduce:\n    busbw: {LOOSE.replace('GB/s', 'us')}\n",
     "th/lab.yaml:5: defaults.all_reduce.busbw.unit: unit us does not fit busbw", ""),
])
def test_platforms_show_exits_4_on_what_run_refuses(tmp_path: Path, text: str, where: str, hint: str) -> None:
    out = show(tmp_path, text)
    assert out.returncode == 4, (out.stdout, out.stderr)
    assert out.stderr.count("\n") == 1 and where in out.stderr and hint in out.stderr, out.stderr


def test_a_metric_typo_under_a_check_id_the_suite_lacks_is_refused_before_a_run(tmp_path: Path) -> None:
    """The suite runs another check: the typo's check id is never judged, and was never named."""
    path = tmp_path / "lab.yaml"
    path.write_text(TYPO_METRIC.replace("allreduce-bf16", "some-other") + f"defaults:\n  all_reduce:\n    busbw: {LOOSE}\n")
    suite = tmp_path / "s.yaml"
    suite.write_text("checks:\n  - id: mine\n    measure: all_reduce\n    params: {sizes: [1KiB]}\n")
    (check,) = load_suite(suite, "s.yaml").checks
    with pytest.raises(UserError, match=r"lab.yaml:5: checks.some-other.bsubw: .*did you mean 'busbw'"):
        check_metrics(check, load_profile(path))


def test_every_shipped_profile_passes_and_shows() -> None:
    search = search_path()
    for name in search.files():
        check_profile(search.load(name))
    out = subprocess.run([sys.executable, "-m", "clustercheck", "platforms", "show", "cpu"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("cpu: "), out.stderr
