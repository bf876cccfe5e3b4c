"""pci-acs: every lspci-acs fixture parses; redirect on a bridge fails and names it; flipping one flag
in real text turns a pass into a failure; the sysfs capability walk reads real config bytes."""

from __future__ import annotations

import re

import pytest

from clustercheck.probes import pci_acs
from clustercheck.probes.base import ProbeParseError
from evidence import files, ids, text

ACS = "lspci-acs"
FIXTURES = files(ACS)


@pytest.mark.parametrize("path", FIXTURES, ids=ids(FIXTURES))
def test_every_fixture_parses_one_device_per_acsctl_line(path):
    raw = path.read_text()
    body = raw.split("\n", 2)[2]  # skip the source line and the blank line
    scan = pci_acs.parse(raw)
    assert len(scan.devices) == len(re.findall(r"^\s*ACSCtl:", body, re.M))
    for dev in scan.devices:
        assert {name for name, _ in dev.ctl} >= {"ReqRedir", "CmpltRedir", "SrcValid"}


def test_redirect_enabled_on_plx_ports_fails_and_names_both_bridges():
    scan = pci_acs.parse(text(ACS, "plx-pex8749-downstream-ports-acs-redirect-enabled-n1sdp.txt"))
    verdicts = pci_acs.judge(scan, {})
    assert [(v.subject, v.passed) for v in verdicts] == [("0000:02:08.0", False), ("0000:02:10.0", False)]
    assert all(d.bridge and d.flag("SrcValid") and d.flag("UpstreamFwd") for d in scan.devices)
    assert "setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000" in verdicts[0].detail


def test_srcvalid_alone_passes():
    scan = pci_acs.parse(text(ACS, "supermicro-as4124gs-tnr-root-ports-acs-srcvalid-only-and-off.txt"))
    assert [d.subject for d in scan.devices] == ["0000:00:01.1", "0000:00:07.1"]
    assert scan.devices[0].flag("SrcValid") and not scan.devices[1].flag("SrcValid")
    assert all(v.passed for v in pci_acs.judge(scan, {}))


@pytest.mark.parametrize("flag", ["ReqRedir", "CmpltRedir"])
def test_flipping_one_redirect_flag_on_one_bridge_fails_only_that_bridge(flag):
    raw = text(ACS, "supermicro-as4124gs-tnr-root-ports-acs-srcvalid-only-and-off.txt")
    head, sep, tail = raw.partition("00:07.1 PCI bridge")
    tail = tail.replace(f"ACSCtl:\tSrcValid- TransBlk- {'ReqRedir-' if flag == 'ReqRedir' else 'ReqRedir- CmpltRedir-'}",
                        f"ACSCtl:\tSrcValid- TransBlk- {'ReqRedir+' if flag == 'ReqRedir' else 'ReqRedir- CmpltRedir+'}", 1)
    verdicts = pci_acs.judge(pci_acs.parse(head + sep + tail), {})
    assert [(v.subject, v.passed) for v in verdicts] == [("0000:00:01.1", True), ("0000:00:07.1", False)]


def test_grep_output_without_device_lines_is_judged_line_by_line():
    raw = text(ACS, "grep-acsctl-asus-esc8000a-all-disabled.txt")
    assert all(v.passed for v in pci_acs.judge(pci_acs.parse(raw), {}))
    lines = raw.split("\n")
    lines[10] = lines[10].replace("CmpltRedir-", "CmpltRedir+")
    failed = [v for v in pci_acs.judge(pci_acs.parse("\n".join(lines)), {}) if not v.passed]
    assert [v.subject for v in failed] == ["ACSCtl line 9"]  # line 11 of the file, after the 2 header lines


def test_redirect_allowed_on_vms_by_expectation():
    scan = pci_acs.parse(text(ACS, "plx-pex8749-downstream-ports-acs-redirect-enabled-n1sdp.txt"))
    assert all(v.passed for v in pci_acs.judge(scan, {"acs_redirect": True}))


def test_endpoint_with_acs_capability_all_minus_passes():
    scan = pci_acs.parse(text(ACS, "cx7-endpoint-21-00.0-acs-all-minus.txt"))
    assert [(d.subject, d.bridge) for d in scan.devices] == [("0000:21:00.0", False)]
    assert pci_acs.judge(scan, {})[0].passed


def test_an_acs_capability_without_its_acsctl_line_is_not_judged_naming_the_device():
    raw = text(ACS, "plx-pex8749-downstream-ports-acs-redirect-enabled-n1sdp.txt")
    ctl = "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
    assert raw.count(ctl) == 2
    verdicts = pci_acs.judge(pci_acs.parse(raw.replace(ctl, "", 1)), {})
    assert [(v.subject, v.word) for v in verdicts] == [("0000:02:08.0", "NOT JUDGED"), ("0000:02:10.0", "FAIL")]
    assert "not judged: an ACS capability (ACSCap) and no ACSCtl line under it" in verdicts[0].detail
    endpoint = text(ACS, "cx7-endpoint-21-00.0-acs-all-minus.txt")
    cut = re.sub(r"^\s*ACSCtl:.*\n", "", endpoint, flags=re.M)   # the capability line alone is enough
    only = pci_acs.judge(pci_acs.parse(re.sub(r"^\s*ACSCap:.*\n", "", cut, flags=re.M)), {})
    assert [(v.subject, v.word) for v in only] == [("0000:21:00.0", "NOT JUDGED")]


@pytest.mark.parametrize("bad", ["", "hello\nworld\n", "00:01.0 bridge\n\tACSCtl: nothing here\n"])
def test_text_that_is_not_lspci_is_a_parse_error(bad):
    with pytest.raises(ProbeParseError):
        pci_acs.parse(bad)


def _config_with_acs(ctl: int, at: int = 0x150) -> bytes:
    cfg = bytearray(4096)
    cfg[0x100:0x104] = (0x0001 | (1 << 16) | (at << 20)).to_bytes(4, "little")  # AER, next -> ACS
    cfg[at:at + 4] = (0x000D | (1 << 16)).to_bytes(4, "little")                 # ACS, last
    cfg[at + 6:at + 8] = ctl.to_bytes(2, "little")
    return bytes(cfg)


def test_config_space_walk_finds_the_acs_control_word():
    assert pci_acs.acs_control(_config_with_acs(0b1101)) == 0b1101
    assert pci_acs.acs_control(bytes(256)) is None       # no extended space (conventional PCI)
    assert pci_acs.acs_control(bytes(4096)) is None      # empty capability list


def test_live_scan_on_this_machine_gives_a_verdict_or_a_reason():
    from clustercheck.probes import get, run_live

    outcome = run_live(get("pci-acs"), {})
    assert outcome.outcome in ("passed", "failed", "skipped")
    assert outcome.verdicts or outcome.reason


def _without_root(raw: str) -> str:
    """A real `sudo lspci -vvv` capture as lspci prints it without root: each device's capability list
    replaced by one `Capabilities: <access denied>` line."""
    out, skipping = [], False
    for line in raw.split("\n"):
        if pci_acs._HEADER.match(line):
            skipping = False
        elif line.strip().startswith("Capabilities:"):
            if not skipping:
                out.append("\tCapabilities: <access denied>")
            skipping = True
            continue
        elif skipping and (line.startswith("\t\t") or line.startswith("                ")):
            continue
        out.append(line)
    return "\n".join(out)


def test_lspci_without_root_is_not_judged_never_a_clean_pass():
    raw = _without_root(text(ACS, "cx7-endpoint-21-00.0-acs-all-minus.txt"))
    assert "<access denied>" in raw and "ACSCtl" not in raw
    scan = pci_acs.parse(raw)
    assert scan.denied == ("0000:21:00.0",)
    verdicts = pci_acs.judge(scan, {})
    assert [(v.subject, v.judged, v.passed) for v in verdicts] == [("node", False, False)]
    assert "lspci ran without root" in verdicts[0].detail and "0000:21:00.0" in verdicts[0].detail


def test_a_device_denied_beside_one_read_is_not_judged_too():
    read = text(ACS, "cx7-endpoint-21-00.0-acs-all-minus.txt")
    denied = _without_root(read.replace("21:00.0", "22:00.0"))
    verdicts = pci_acs.judge(pci_acs.parse(read + "\n" + denied.split("\n", 2)[2]), {})
    assert [(v.subject, v.judged) for v in verdicts] == [("node", False), ("0000:21:00.0", True)]


def test_a_header_with_a_long_run_of_blanks_is_refused_in_linear_time():
    # `\s+([^:]+: .+)` split the blanks between two patterns: 1.66 s at 40k blanks, minutes at 6 MB
    assert pci_acs._HEADER.pattern.endswith(r"\s+([^:\s][^:]*: .+)$")
    with pytest.raises(ProbeParseError):
        pci_acs.parse("00:01.0" + " " * (6 << 20) + "x\n")
