"""Node n1 as `measure: ib_write_bw` sees it, for the tests of that check: its /sys built from a real ibstat
capture (two dual-port ConnectX-3, mlx4_0 and mlx4_1, each port ACTIVE/LinkUp FDR), fabric/rdma.py reading that
tree, and a stand-in ib_write_bw on PATH, the one boundary this machine lacks (no RDMA device, no perftest).
The rank, its tool runs and the judge are the real ones."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from clustercheck.kinds.base import Answers, CheckSpec
from evidence import text


def answers(result: dict[str, Any], params: dict[str, Any] | None = None) -> Answers:
    """What the judge is handed: `result` from n1's rank 0 (its rank 1 measures nothing) for a check with `params`."""
    check = CheckSpec("ib-write-bw", "ib_write_bw", "node", params or {}, (), 60, "", "s.yaml", 1)
    return Answers(check, [result, {}], [{"host": "n1"}, {"host": "n1"}], "nccl")


def connectx3_sys(tmp: Path) -> Path:
    """/sys of a node with mlx4_0 and mlx4_1, each two ACTIVE/LinkUp FDR ports, as the ibstat capture says,
    written as tmp/sys; a test then breaks it as a node breaks."""
    from clustercheck.probes import ib
    from sysfs_tree import Tree, add_ports

    ports = ib.parse(text("ibstat", "2x-connectx3-mlx4-dualport-fdr56-active.txt"))
    tree = add_ports(Tree(), [(p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports], {})
    return tree.write(tmp / "sys")


def on_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: Path, capture: Path) -> Path:
    """The rank reads its network facts from the tree at `root`, and finds a stand-in ib_write_bw on PATH that
    logs its argument list and, as the client (the one given `localhost`), prints the real perftest `capture`.
    Returns the log, a line per run of the tool."""
    from clustercheck.fabric import rdma

    read = rdma.read
    monkeypatch.setattr(rdma, "read", lambda *a, **k: read(root, tmp_path / "proc", kernel="6.8.0"))
    bin_dir, log = tmp_path / "bin", tmp_path / "argv.log"
    bin_dir.mkdir()
    tool = bin_dir / "ib_write_bw"
    tool.write_text(f"#!{sys.executable}\nimport sys\nopen({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
                    f"if 'localhost' in sys.argv:\n    sys.stdout.write(open({str(capture)!r}).read())\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def first_rank(params: dict[str, Any]) -> dict[str, Any]:
    """What n1's rank 0 (of one, on gloo) answers for the check's `params` over the defaults it is given."""
    import torch

    from clustercheck.measure import RankContext
    from clustercheck.measure.native_io import ib_write_bw

    ctx = RankContext(rank=0, world_size=1, local_rank=0, backend="gloo", device=torch.device("cpu"), host="n1")
    return ib_write_bw(ctx, {"size": 8 << 20, "duration": 5, "qps": 1, "gid_index": None, "tool_timeout": 60,
                             **params})
