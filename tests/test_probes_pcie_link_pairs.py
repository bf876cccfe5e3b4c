"""pcie-link from lspci -vvv: a LnkCap without its LnkSta, or a LnkSta without its LnkCap, is never dropped
silently; a LnkSta lspci marks (downgraded) fails on its own. Real capture: the stelline ConnectX-7
(tests/fixtures/tool-outputs/lspci-acs/, source on line 1), edited as a cut or damaged capture reads."""

from __future__ import annotations

from clustercheck.probes import pcie_link
from evidence import text

CX7 = text("lspci-acs", "cx7-endpoint-21-00.0-acs-all-minus.txt")
BODY = CX7.split("\n", 2)[2]   # without the source note


def verdicts(raw: str) -> list[tuple[str, bool, bool, str]]:
    return [(v.subject, v.judged, v.passed, v.detail) for v in pcie_link.judge(pcie_link.parse(raw), {})]


def test_the_capture_as_printed_passes():
    assert [(s, j, p) for s, j, p, _ in verdicts(CX7)] == [("0000:21:00.0", True, True)]


def test_a_second_nic_with_lnkcap_and_no_lnksta_is_not_judged_naming_the_line():
    second = "\n".join(l for l in BODY.replace("21:00.0", "22:00.0").split("\n") if "LnkSta:" not in l)
    raw = CX7.rstrip("\n") + "\n" + second
    got = verdicts(raw)
    assert [(s, j, p) for s, j, p, _ in got] == [("0000:21:00.0", True, True), ("0000:22:00.0", False, False)]
    cap_line = next(i for i, l in enumerate(raw.split("\n")[2:], 1) if "22:00.0" in l)
    cap_line += next(i for i, l in enumerate(second.split("\n")) if "LnkCap:" in l)
    assert f"LnkCap/LnkSta pair incomplete at line {cap_line}" in got[1][3], got[1][3]


def test_a_downgraded_lnksta_without_lnkcap_fails():
    lines = [l for l in CX7.split("\n") if "LnkCap:" not in l]
    raw = "\n".join(l.replace("LnkSta: Speed 32GT/s, Width x16", "LnkSta: Speed 16GT/s (downgraded), Width x8 "
                              "(downgraded)") for l in lines)
    assert "(downgraded)" in raw
    ((subject, judged, passed, detail),) = verdicts(raw)
    assert (subject, judged, passed) == ("0000:21:00.0", True, False) and "downgraded" in detail


def test_a_lnksta_without_lnkcap_and_not_downgraded_is_not_judged():
    raw = "\n".join(l for l in CX7.split("\n") if "LnkCap:" not in l)
    ((subject, judged, passed, detail),) = verdicts(raw)
    assert (subject, judged, passed) == ("0000:21:00.0", False, False) and "a LnkSta and no LnkCap" in detail
