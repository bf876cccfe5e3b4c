"""A record written before the network facts' problems were structured holds each as its text alone; it must stay
readable by later versions (a run's evidence is re-rendered and verified long after the run), each problem
classified as the version that wrote it classified it."""

from __future__ import annotations

import pytest

from clustercheck.errors import HarnessError
from clustercheck.fabric.rdma import Problem, problems_of


@pytest.mark.parametrize("text, subject, unread, nic", [
    ("mlx5_0/1: state ACTIVE but physical state Disabled: the sysfs tree contradicts itself", "mlx5_0/1", False, True),
    ("mlx5_0/1: /sys/class/infiniband/mlx5_0/ports/1/rate cannot be read", "mlx5_0/1", True, True),
    ("mlx5_2: /sys/class/infiniband/mlx5_2/ports lists no port", "mlx5_2", False, True),
    ("mlx5_3: no PCI device behind it (/sys/class/infiniband/mlx5_3/device is not a link to one)", "mlx5_3", False,
     False),
    ("mlx5_4: its PCI function 0000:1a:00.0 is not under /sys/bus/pci/devices", "mlx5_4", False, False),
    ("/sys/class/infiniband: cannot be listed (Permission denied)", None, True, True),
    ("/sys/bus/pci/devices: cannot be listed (Permission denied)", None, True, False),
])
def test_a_problem_recorded_as_text_reads_as_the_version_that_wrote_it_classified_it(
        text: str, subject: str | None, unread: bool, nic: bool) -> None:
    assert problems_of([text], "n1") == (Problem(subject, text, unread, nic),)


@pytest.mark.parametrize("entry", ["", 7, None, {"text": "mlx5_0: x"}])
def test_an_entry_of_no_shape_any_version_wrote_is_still_the_harness_error(entry: object) -> None:
    with pytest.raises(HarnessError, match="n1: problem"):
        problems_of([entry], "n1")
