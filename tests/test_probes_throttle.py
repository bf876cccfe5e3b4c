"""The throttle probe never passes a slowdown reason it could not read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clustercheck.probes import throttle
from clustercheck.probes.base import ProbeVerdict

FIXTURE = Path(__file__).parent / "fixtures/tool-outputs/nvidia-smi-q/h100-80gb-hbm3-nvidia-smi-a-della.txt"


def _clock_verdict(text: str) -> ProbeVerdict:
    verdicts = [v for v in throttle.judge(throttle.parse(text), {}) if v.what == "clock throttling"]
    assert len(verdicts) == 1
    return verdicts[0]


def test_clean_fixture_passes() -> None:
    v = _clock_verdict(FIXTURE.read_text())
    assert v.passed and v.judged


@pytest.mark.parametrize("value", ["N/A", "Not Supported", "[N/A]"])
def test_judged_reasons_not_read_are_not_judged(value: str) -> None:
    text = FIXTURE.read_text()
    for r in throttle.BAD_REASONS:
        text = re.sub(rf"({re.escape(r)}\s*:\s*)Not Active", rf"\g<1>{value}", text)
    v = _clock_verdict(text)
    assert not v.passed and not v.judged
    assert v.detail.startswith("not judged: ") and "HW Slowdown" in v.detail
    assert v.subject == "GPU0 (0000:19:00.0)"


def test_one_judged_reason_not_read_is_not_judged() -> None:
    text = re.sub(r"(SW Thermal Slowdown\s*:\s*)Not Active", r"\1N/A", FIXTURE.read_text())
    v = _clock_verdict(text)
    assert not v.passed and not v.judged and "SW Thermal Slowdown = 'N/A'" in v.detail


def test_judged_reasons_missing_from_section_are_not_judged() -> None:
    text = re.sub(r"\n\s*(HW Slowdown|HW Thermal Slowdown|HW Power Brake Slowdown|SW Thermal Slowdown)\s*:[^\n]*",
                  "", FIXTURE.read_text())
    v = _clock_verdict(text)
    assert not v.passed and not v.judged and "HW Power Brake Slowdown missing" in v.detail


def test_active_reason_still_fails_when_another_is_not_read() -> None:
    text = re.sub(r"(HW Slowdown\s*:\s*)Not Active", r"\1Active", FIXTURE.read_text(), count=1)
    text = re.sub(r"(SW Thermal Slowdown\s*:\s*)Not Active", r"\1N/A", text)
    v = _clock_verdict(text)
    assert not v.passed and v.judged and "active: HW Slowdown" in v.detail


@pytest.mark.parametrize("value", ["N/A", "Not Supported", "[N/A]"])
def test_temperature_not_read_is_not_judged(value: str) -> None:
    """The real H100 capture with its `GPU Current Temp : 33 C` edited here to N/A / Not Supported: the GPU got
    no temperature verdict while its throttling passed, so the probe exited 0."""
    text = FIXTURE.read_text()
    assert "GPU Current Temp                  : 33 C" in text
    text = text.replace("GPU Current Temp                  : 33 C", f"GPU Current Temp                  : {value}")
    temps = [v for v in throttle.judge(throttle.parse(text), {}) if v.what == "temperature"]
    assert [(v.subject, v.passed, v.judged) for v in temps] == [("GPU0 (0000:19:00.0)", False, False)]
    assert temps[0].detail.startswith(f"not judged: GPU Current Temp reads {value!r}")
    assert _clock_verdict(text).passed


EIGHT = FIXTURE.parent / "h100-sxm5-8gpu-565.57-nvidia-smi-a-nvsim.txt"


def test_a_gpu_lacking_the_temperature_its_siblings_print_is_not_judged() -> None:
    """The real 8x H100 capture with GPU2's `GPU Current Temp` line cut here by hand: GPU2 had only its
    throttling verdict, and the probe passed."""
    lines = EIGHT.read_text().splitlines(keepends=True)
    at = [i for i, l in enumerate(lines) if "GPU Current Temp" in l]
    assert len(at) == 8
    del lines[at[2]]
    verdicts = [v for v in throttle.judge(throttle.parse("".join(lines)), {}) if not v.passed]
    assert [(v.subject, v.what, v.judged) for v in verdicts] == [("GPU2 (0000:3a:00.0)", "temperature", False)]
    assert verdicts[0].detail.startswith("not judged: no GPU Current Temp for this GPU")


def test_a_gpu_lacking_the_clock_event_reasons_its_siblings_print_is_not_judged() -> None:
    """The same capture with GPU2's `Clocks Event Reasons` section cut here by hand: only its temperature was
    judged, and the probe passed."""
    text = EIGHT.read_text()
    sections = list(re.finditer(r"    Clocks Event Reasons\n(?:        .*\n)+", text))
    assert len(sections) == 8
    text = text[:sections[2].start()] + text[sections[2].end():]
    verdicts = [v for v in throttle.judge(throttle.parse(text), {}) if not v.passed]
    assert [(v.subject, v.what, v.judged) for v in verdicts] == [("GPU2 (0000:3a:00.0)", "clock throttling", False)]
    assert verdicts[0].detail.startswith("not judged: no Clocks Event Reasons section for this GPU")
