"""A node's hardware identity for signed evidence (clustercheck/judging/identity.py): GPU UUIDs, serials and
VBIOS through the real pynvml over the stand-in library answering from a captured 8 x H100 `nvidia-smi -a`
(tests/nvml_standin/), board serials from DMI and NIC GUIDs and MACs from sysfs trees laid out here. What
cannot be read is named, never left out silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from clustercheck.judging.identity import read_identity
from nvml_capture import failing, h100_node, in_process

NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9


def sysfs(root: Path) -> tuple[Path, Path]:
    """/sys/class with one mlx5 device and a physical and a virtual interface; a DMI folder whose board
    serial cannot be read (as for a user who is not root: here a directory stands in for the unreadable file)."""
    cls, dmi = root / "class", root / "dmi"
    (cls / "infiniband" / "mlx5_0").mkdir(parents=True)
    (cls / "infiniband" / "mlx5_0" / "node_guid").write_text("a088:c203:0044:1e2a\n")
    (cls / "infiniband" / "mlx5_0" / "fw_ver").write_text("28.39.1002\n")
    for name, physical in (("ens1f0", True), ("lo", False)):
        (cls / "net" / name).mkdir(parents=True)
        (cls / "net" / name / "address").write_text("b8:3f:d2:11:22:33\n" if physical else "00:00:00:00:00:00\n")
        if physical:
            (cls / "net" / name / "device").mkdir()
    dmi.mkdir()
    (dmi / "board_asset_tag").write_text("RACK7-U12\n")
    (dmi / "product_name").write_text("DGX H100\n")
    (dmi / "board_serial").mkdir()
    return cls, dmi


def test_gpus_board_and_nics_are_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    in_process(monkeypatch, h100_node())
    cls, dmi = sysfs(tmp_path)
    ident = read_identity(cls, dmi)
    gpus = ident["gpus"]
    assert len(gpus) == 8
    assert gpus[0]["uuid"] == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1" and gpus[0]["serial"] == "1654423001593"
    assert gpus[0]["vbios"] == "96.00.74.00.01" and gpus[0]["name"] == "NVIDIA H100 80GB HBM3"
    assert len({g["uuid"] for g in gpus}) == 8 and all(g["bus_id"] for g in gpus)
    assert ident["board"] == {"board_asset_tag": "RACK7-U12", "product_name": "DGX H100"}
    assert ident["unreadable"] == ["dmi.board_serial"]
    assert ident["nics"] == [{"name": "mlx5_0", "node_guid": "a088:c203:0044:1e2a", "fw": "28.39.1002"},
                             {"name": "ens1f0", "mac": "b8:3f:d2:11:22:33"}]  # lo is not hardware
    assert ident["hostname"] and ident["kernel"]


def test_a_gpu_whose_serial_cannot_be_read_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    in_process(monkeypatch, failing(h100_node(), 3, "nvmlDeviceGetSerial", NVML_ERROR_NO_PERMISSION))
    ident = read_identity(*sysfs(tmp_path))
    assert "serial" not in ident["gpus"][3] and ident["gpus"][3]["uuid"]
    assert "GPU3.serial" in ident["unreadable"]


def test_without_a_driver_there_are_no_gpus_and_no_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    in_process(monkeypatch, {**h100_node(), "init_error": NVML_ERROR_DRIVER_NOT_LOADED})  # nvmlInit fails
    ident = read_identity(tmp_path / "none", tmp_path / "none")
    assert ident["gpus"] == [] and ident["nics"] == [] and ident["board"] == {} and ident["unreadable"] == []
