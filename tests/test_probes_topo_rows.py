"""topo: a device row whose column is missing is a problem, never dropped silently. Real capture: della
8x H100 (tests/fixtures/tool-outputs/nvidia-smi-topo/, source on line 1), its GPU7 column removed."""

from __future__ import annotations

from clustercheck.probes import topo
from evidence import text

DELLA = text("nvidia-smi-topo", "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt")


def without_column(raw: str, index: int) -> str:
    """Remove the `index`-th tab-separated cell (after the row name) from the header and every matrix row."""
    out = []
    for line in raw.split("\n"):
        cells = line.split("\t")
        if len(cells) > index + 1 and (line.startswith("\tGPU0") or line.startswith(("GPU", "NIC"))):
            del cells[index + 1]
        out.append("\t".join(cells))
    return "\n".join(out)


def test_a_row_without_its_column_is_a_problem_and_fails():
    raw = without_column(DELLA, 7)
    assert "\tGPU7\t" not in raw and "\nGPU7\t" in raw
    m = topo.parse(raw)
    assert "GPU7" not in m.gpus
    assert any(p.startswith("GPU7 has a row and no column") for p in m.problems), m.problems
    verdicts = topo.judge(m, {"gpu_count": 8})
    assert not all(v.passed for v in verdicts)
    assert any("GPU7 has a row and no column" in v.detail and not v.passed for v in verdicts)


def test_the_capture_as_printed_has_no_problem():
    assert topo.parse(DELLA).problems == ()
