"""--launcher k8s --gpus-per-node G on nodes with more GPUs: each pod sees only its G, so a platform detected
from the nodes (an 8-GPU H100 board) would fail every node as "GPUs missing", and --taint would taint them all."""

from __future__ import annotations

import pytest

from clustercheck.errors import HarnessError, UserError
from clustercheck.judging.platform import Facts
from clustercheck.judging.profiles import search_path
from clustercheck.run.k8s.launcher import check_gpus


def h100_pod(host: str, nvml: int) -> Facts:
    """A pod on an 8-GPU H100 node: NVML lists the GPUs the pod was given, the PCI bus shows all eight."""
    return Facts(host=host, gpu_count=nvml, pci_device_ids=(0x2330,), nvlinks_per_gpu=18, pci_accelerators=(0x2330,) * 8)


def test_fewer_gpus_than_the_detected_platform_holds_is_refused_naming_platform() -> None:
    nodes = {"n0": h100_pod("n0", 4), "n1": h100_pod("n1", 4)}
    with pytest.raises(UserError) as err:
        check_gpus(4, search_path(environ={}), nodes)
    said = str(err.value)
    assert said.startswith("--gpus-per-node 4 is fewer than the 8 GPUs of platform h100-sxm") and \
        "--platform" in said and "\n" not in said, said


def test_with_platform_given_or_every_gpu_asked_for_nothing_is_refused() -> None:
    check_gpus(4, None, {"n0": h100_pod("n0", 4)})  # --platform names the 4-GPU profile: the user's choice
    check_gpus(8, search_path(environ={}), {"n0": h100_pod("n0", 8)})
    check_gpus(0, search_path(environ={}), {"n0": Facts(host="n0", gpu_count=0)})  # a CPU run


def test_a_pod_that_sees_more_than_its_gpus_is_an_error_naming_its_node() -> None:
    with pytest.raises(HarnessError) as err:
        check_gpus(4, None, {"n0": h100_pod("n0", 4), "n1": h100_pod("n1", 8)})
    assert "n1: 8" in str(err.value) and "n0" not in str(err.value), err.value
    assert not isinstance(err.value, UserError)


def test_a_pod_that_sees_fewer_than_its_gpus_is_left_to_judging() -> None:
    """A GPU fallen off the bus after allocation (7 of 8) is the node's fault: the platform's GPU count fails it
    by name, where stopping the run as a harness error named no failing node and excluded nothing."""
    check_gpus(8, None, {"n0": h100_pod("n0", 8), "n1": h100_pod("n1", 7)})
