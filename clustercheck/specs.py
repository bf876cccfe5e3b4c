"""Hardware spec table: every value with its unit and its public source.

All link rates are *unidirectional* (per direction) unless a field says bidirectional; datasheets
quote duplex totals, which are the bidirectional fields here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecValue:
    value: float
    unit: str
    source: str


_ML_ENG = "stas00/ml-engineering network/README.md (intra-node table), seeds/000"
_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (900 GB/s NVLink, duplex)"


def _pcie(gen: int, gts: float, enc: float, lanes: int, source: str) -> dict[str, SpecValue]:
    uni = round(gts * lanes * enc / 8, 2)
    return {
        "unidirectional": SpecValue(uni, "GB/s", f"{source}: {gts} GT/s x{lanes}, {enc:.4f} encoding"),
        "bidirectional": SpecValue(round(2 * uni, 2), "GB/s", f"{source}: 2 x unidirectional"),
    }


_PCIE_SRC = "PCI-SIG base specifications; reference/measurement.md §6 line rates"

SPECS: dict[str, dict[str, SpecValue]] = {
    "nvlink3": {
        "unidirectional": SpecValue(300.0, "GB/s", f"NVLink 3 (A100), 12 links x 25 GB/s: {_ML_ENG}"),
        "bidirectional": SpecValue(600.0, "GB/s", f"NVLink 3 (A100), 12 links duplex: {_ML_ENG}"),
        "links": SpecValue(12, "count", "NVIDIA A100 datasheet: 12 NVLinks per GPU"),
    },
    "nvlink4": {
        "unidirectional": SpecValue(450.0, "GB/s", f"NVLink 4 (H100/H200), 18 links x 25 GB/s: {_ML_ENG}; {_H100_DS}"),
        "bidirectional": SpecValue(900.0, "GB/s", f"NVLink 4, 18 links duplex: {_H100_DS}"),
        "links": SpecValue(18, "count", f"{_H100_DS}: 18 NVLinks per GPU"),
    },
    "nvlink5": {
        "unidirectional": SpecValue(900.0, "GB/s", f"NVLink 5 (B200), 18 links x 50 GB/s: {_ML_ENG}"),
        "bidirectional": SpecValue(1800.0, "GB/s", f"NVLink 5, 18 links duplex: {_ML_ENG}"),
        "links": SpecValue(18, "count", "NVIDIA Blackwell datasheet: 18 NVLinks per GPU"),
    },
    "pcie3_x16": _pcie(3, 8.0, 128 / 130, 16, _PCIE_SRC),
    "pcie4_x16": _pcie(4, 16.0, 128 / 130, 16, _PCIE_SRC),
    "pcie5_x16": _pcie(5, 32.0, 128 / 130, 16, _PCIE_SRC),
}


def lookup(name: str, field: str) -> SpecValue:
    """Return SPECS[name][field]; KeyError with the valid choices when absent."""
    try:
        entry = SPECS[name]
    except KeyError:
        raise KeyError(f"no spec {name!r}; known: {', '.join(sorted(SPECS))}") from None
    try:
        return entry[field]
    except KeyError:
        raise KeyError(f"spec {name!r} has no field {field!r}; known: {', '.join(sorted(entry))}") from None
