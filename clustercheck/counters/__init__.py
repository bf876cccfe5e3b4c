"""Hardware counters per check window (issue 17, burn-in): each node snapshots its error counters (PCIe
AER, InfiniBand ports, GPU ECC, row remapping, retired pages and NVLink errors through NVML, CPU thermal
throttle counts), its gauges (thermal zones, CPU clocks) and its kernel log position before and after a
check; any increase beyond the profile's allowance fails that check's item, naming the counter, device
and delta. Plain typed modules, no torch, no pytest:

    facts.py        Counter, Gauge, KernelLine, ReadError, Snapshot (to and from builtins)
    pci.py          BUS_ID: the one pattern of a PCI bus id every reader here matches
    sysfs.py        AER, IB, thermal zones, CPU frequency and throttle counters (root paths for tests)
    kernel_log.py   the window's kernel lines from /dev/kmsg (or dmesg), Xid/SXid/AER/MCE classified
    nvml_counters.py  GPU counters through pynvml
    snapshot.py     take(previous): every reader at once; rank_snapshot for a node's first rank
    delta.py        delta(before, after): increases per counter and device, and what kept it whole
    allowances.py   DEFAULTS with sources, a profile's `counters:` block, judge (judging/windows.py: as verdicts)
"""

from clustercheck.counters.allowances import DEFAULTS, Allowance, Judgement, judge
from clustercheck.counters.delta import Delta, Increase, delta
from clustercheck.counters.facts import Counter, Gauge, KernelLine, LogCursor, ReadError, Snapshot
from clustercheck.counters.snapshot import Sources, take

__all__ = ["DEFAULTS", "Allowance", "Counter", "Delta", "Gauge", "Increase", "Judgement", "KernelLine", "LogCursor",
           "ReadError", "Snapshot", "Sources", "delta", "judge", "take"]
