"""nccl-log probe, fail closed: real captures (tests/fixtures/nccl-debug/, source on line 1) edited the way
a broken run prints them must never read as a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.cli import main

LOGS = Path(__file__).parent / "fixtures" / "nccl-debug"
FOUR_NICS = LOGS / "nccl-707-a100-four-nics-gdrdma.txt"
AT = len(FOUR_NICS.read_text().rstrip("\n").split("\n")) + 1  # the first line appended to it


def probe(capsys: pytest.CaptureFixture[str], path: Path, *expect: str) -> tuple[int, list[str]]:
    args = ["probe", "nccl-log", "--input", str(path)]
    for e in expect:
        args += ["--expect", e]
    code = main(args)
    return code, capsys.readouterr().out.splitlines()


def line(lines: list[str], what: str) -> str:
    (found,) = [x for x in lines if f": {what}: " in x]
    return found


def edited_707(tmp_path: Path, *lines: str) -> Path:
    """nccl-707-a100-four-nics-gdrdma.txt (IB, GDRDMA, one host) with `lines` appended."""
    path = tmp_path / "nccl-707-edited.txt"
    path.write_text(FOUR_NICS.read_text().rstrip("\n") + "\n" + "\n".join(lines) + "\n")
    return path


def test_two_channel_records_glued_on_one_line_are_not_judged_as_ib(capsys, tmp_path):
    # a real IB/GDRDMA channel line of #707 with a Socket record of the peer glued after it
    glued = ("10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] via "
             "NET/IB/5/GDRDMA Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/0")
    code, lines = probe(capsys, edited_707(tmp_path, glued), "net=IB", "gdr=true")
    assert code != 0, lines
    for what in ("network", "GPUDirect RDMA"):
        assert line(lines, what).startswith(f"NOT JUDGED NCCL: {what}: not judged: garbled channel line(s)"), lines
        assert f"line {AT} on 10-90-43-152" in line(lines, what)
    code, lines = probe(capsys, FOUR_NICS, "net=IB", "gdr=true")  # the capture as printed still passes
    assert code == 0, lines
