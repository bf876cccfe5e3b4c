"""Expectations: what probes judge a node against, from a profile's `expect:` block or `--expect`. Checked
at load with file, line and key like every other input. A leaf module: thresholds and probes both use it."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

from clustercheck.errors import UserError, show
from clustercheck.units import fmt, is_number

# key -> (accepted types, help). Nested `topology` keys are in TOPOLOGY_KEYS.
EXPECT_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "gpu_count": ((int,), "GPUs the inventory and topology must show"),
    "gpu_model": ((str,), "text the GPU product name must contain, e.g. 'H100'"),
    "nvlinks_per_gpu": ((int,), "active NVLinks every GPU must have"),
    "nvswitch_fabric": ((bool,), "whether every GPU must be registered with an NVSwitch fabric (State Completed, "
                        "Status Success)"),
    "topology": ((dict,), "GPU<->GPU and GPU<->NIC link levels as nvidia-smi topo -m prints them (AMD: XGMI, PCIE)"),
    "acs_redirect": ((bool,), "whether ACS request/completion redirect may be on (true only on VMs)"),
    "pcie_gen": ((int,), "PCIe generation every GPU link must reach"),
    "pcie_width": ((int,), "PCIe lanes every GPU link must have"),
    "ib_rate_gbps": ((int, float), "rate every active IB/RoCE port must run at, Gb/s"),
    "ib_ports": ((int,), "how many IB/RoCE ports must be active"),
    "gds": ((bool,), "whether GPUDirect Storage must be usable (nvidia-fs and a supported transport)"),
    "gds_compat_mode": ((bool,), "whether cuFile may fall back to POSIX I/O (use_compat_mode)"),
    "gpu_temp_max_c": ((int, float), "hottest a GPU may run, degrees C"),
    "driver_min": ((str,), "lowest NVIDIA driver version, e.g. '535.104'"),
    "cuda_min": ((str,), "lowest CUDA version the driver supports, e.g. '12.2'"),
    "nccl_min": ((str,), "lowest NCCL version, e.g. '2.18'"),
    "torch_min": ((str,), "lowest torch version"),
    "nccl_env_allow": ((list,), "NCCL variables allowed despite the harmful list, e.g. [NCCL_P2P_DISABLE]"),
    "busbw_min": ((int, float, dict), "lowest nccl-tests busbw at the largest size on one node, GB/s: a number or "
                  "one per collective, e.g. {all_reduce: 430}"),
    "busbw_min_multinode": ((int, float, dict), "the same floor for a multi-node nccl-tests run (bounded by the "
                            "network; no profile sets it)"),
    "nodes": ((int,), "nodes a multi-node nccl-tests capture must span (its Rank lines' hosts)"),
    "fabric_gbps": ((int, float), "the node's aggregate network line rate in Gb/s (3200 for 8 x 400G): the fabric "
                    "floor's base, over a profile's fabric block and the nodes' own ports"),
    "fabric_ports": ((list,), "the RDMA ports (mlx5_0, mlx5_3/1) whose rates make the node's line rate, e.g. to "
                     "leave out a storage NIC; default: the ACTIVE ports sharing a PCIe switch with a GPU"),
    "net": ((str,), "the network NCCL must use between nodes: IB (InfiniBand or RoCE, also through IBext), "
            "Socket, OFI (AWS Libfabric, EFA)"),
    "gdr": ((bool,), "whether GPUDirect RDMA must carry NCCL's network traffic (channel lines /GDRDMA)"),
    "nics": ((int,), "NICs NCCL must use on each node (distinct NET devices in its channel lines)"),
    "p2p": ((bool,), "whether NCCL must connect the GPUs of one host peer-to-peer (P2P over NVLink/NVSwitch): "
            "true fails SHM (host shared memory) between two GPUs of a host, naming host and ranks"),
    "ib_write_bw_min": ((int, float), "lowest ib_write_bw BW average per NIC at the largest size, Gb/s"),
    "gdsio_read_min": ((int, float), "lowest gdsio GPUDirect (GPUD) read throughput per GPU, GiB/s"),
    "gdsio_write_min": ((int, float), "lowest gdsio GPUDirect (GPUD) write throughput per GPU, GiB/s"),
    "h2d_min": ((int, float), "lowest nvbandwidth host_to_device_memcpy_ce/_sm value per GPU, GB/s"),
    "d2h_min": ((int, float), "lowest nvbandwidth device_to_host_memcpy_ce/_sm value per GPU, GB/s"),
    "p2p_min": ((int, float), "lowest nvbandwidth device_to_device_memcpy_read/write value per GPU pair, GB/s"),
    "p2p_uniformity": ((int, float), "every nvbandwidth GPU pair within this fraction of the median, e.g. 0.10"),
}
# keys whose value must be a finite number above 0 (a line rate of 0 would pass anything), and what it is
_POSITIVE = {"fabric_gbps": "a line rate in Gb/s", "nodes": "a node count", "nics": "a NIC count",
             "ib_write_bw_min": "a rate in Gb/s", "gdsio_read_min": "a rate in GiB/s",
             "gdsio_write_min": "a rate in GiB/s", "ib_rate_gbps": "a port rate in Gb/s"}
# bandwidth floors: a floor of 0 passes a dead link's 0.01 GB/s, no floor at all (a finite number first)
_FLOORS = ("h2d_min", "d2h_min", "p2p_min", "busbw_min", "busbw_min_multinode")
# keys with a ceiling, as (lowest, highest, what): a ceiling past anything a node has passes every node
# (gpu_temp_max_c: 1000 is no limit) or judges a count no node can show (gpu_count: 10**20). Per-node counts
# take detect:'s range (GPUs per node up to 1024, as --ranks); nodes a cluster's size. Temperatures: GPUs slow
# down near 90 C and shut down near 100-110 C (H100 slowdown 92 C, MI300X hotspot limit 110 C): a ceiling above
# 150 C is never reached by a running GPU (a Fahrenheit or Kelvin value, 176 or 358, reads as no limit).
_RANGES: dict[str, tuple[int, int, str]] = {
    "gpu_count": (0, 1024, "a GPU count per node"), "nvlinks_per_gpu": (0, 64, "an NVLink count per GPU"),
    "ib_ports": (0, 1024, "a port count per node"), "nics": (1, 1024, "a NIC count per node"),
    "nodes": (1, 65536, "a node count"), "gpu_temp_max_c": (0, 150, "a temperature in degrees C")}
# lowest versions, compared part by part as numbers: text without digits ("banana") is below every version
VERSION_KEYS = ("driver_min", "cuda_min", "nccl_min", "torch_min")
VERSION = re.compile(r"\d+(\.\d+){0,3}")  # 535.104.05, 12.2, 2.18.3: what versions.py compares
TOPOLOGY_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "gpu_gpu": ((str, list), "level every GPU pair must have (NV18) or the allowed levels ([NODE, SYS])"),
    "nvlink_pairs": ((str,), "GPUs come in bridged pairs with this level (NV4); other pairs use gpu_gpu"),
    "gpu_nic": ((str, list), "the nearest NIC of every GPU must be at one of these levels ([PIX, PXB])"),
}


def check_expect(raw: object, file: str, path: str = "expect", line: int = 0) -> dict[str, Any]:
    """Validate an expectation mapping; UserError (one line, file:line:key) on a bad key or type."""
    from clustercheck.schema import Fields

    f = Fields(raw, file, path, line)
    out: dict[str, Any] = {}
    for key, (kinds, _help) in EXPECT_KEYS.items():
        if key in VERSION_KEYS:
            _refuse_version_number(f, key)
        value = f.get(key, kinds, None)
        if value is None:
            continue
        if isinstance(value, str) and not value.strip():
            # `gpu_model: ""` is contained in every name and `driver_min: ""` below every version: the check off
            raise f.error(key, "no value (empty text); give one, or leave the key out for its default")
        if key in VERSION_KEYS and not VERSION.fullmatch(value):
            raise f.error(key, f"expected a version: digits separated by dots, 1 to 4 parts (e.g. '535.104'), got "
                               f"{show(value, 40)}")
        if key == "topology":
            tf = Fields(value, file, f.key_path(key), f.line_of(key))
            topo: dict[str, Any] = {}
            for tkey, (tkinds, _h) in TOPOLOGY_KEYS.items():
                tval = tf.get(tkey, tkinds, None)
                if tval is not None:
                    problem = _levels_problem(tval)
                    if problem:
                        raise tf.error(tkey, problem)
                    topo[tkey] = tval
            tf.done()
            if not topo:  # `topology={}` expects nothing: judged nothing and passed, never an expectation
                raise f.error(key, f"no level given (empty mapping); give one of {', '.join(TOPOLOGY_KEYS)}, or "
                                   f"leave the key out for its default")
            value = topo
        elif key == "nccl_env_allow" and not all(isinstance(v, str) for v in value):
            raise f.error(key, "expected a list of variable names such as [NCCL_P2P_DISABLE]")
        elif key in ("busbw_min", "busbw_min_multinode") and isinstance(value, dict):
            problem = _per_collective_problem(value)
            if problem:
                raise f.error(key, problem)
        elif key == "fabric_ports" and not all(isinstance(v, str) and v for v in value):
            raise f.error(key, "expected a list of RDMA device or port names such as [mlx5_0, mlx5_3/1]")
        elif key == "net" and _net_family(value) is None:
            # any other name matches no network NCCL prints: every node would fail for a typo (InfiniBand)
            raise f.error(key, f"expected IB, Socket or OFI (IBext, RoCE, EFA, Libfabric name one of them), got "
                               f"{show(value, 40)}")
        for name, number in (value.items() if isinstance(value, dict) and key != "topology" else [("", value)]):
            problem = _number_problem(key, number) or _range_problem(key, number)
            if problem:
                raise f.error(key, f"{name}: {problem}" if name else problem)
        out[key] = value
    f.done()
    return out


def _refuse_version_number(f: Any, key: str) -> None:
    """A profile's unquoted `driver_min: 535.10` is the float 535.1 to YAML: its trailing 0 is gone before
    anything reads it, so no number is taken for a version; the message shows the value as written."""
    from clustercheck.yamlfile import Mapping

    raw = f.data.get(key)
    if not is_number(raw):
        return
    written = f.data.texts.get(key) if isinstance(f.data, Mapping) else None
    written = written or fmt(raw)
    raise f.error(key, f"expected a version as text, got the number {written}: quote it ('{written}'); YAML reads "
                       f"a number's trailing zeros away (535.10 is 535.1)")


def _net_family(value: str) -> str | None:
    """IB, Socket or OFI, as the transport judge reads NCCL's network names; None for any other text."""
    from clustercheck.fabric.transport import family  # here: fabric imports probes' modules, which import us

    got = family(value)
    return got if got in ("IB", "Socket", "OFI") else None


_LEVEL = re.compile(r"^(SYS|NODE|PHB|PXB|PIX|NV\d+|XGMI|PCIE)$")  # XGMI/PCIE: AMD's link types


def _levels_problem(value: object) -> str | None:
    items = value if isinstance(value, list) else [value]
    if not items:  # no allowed level: every GPU pair fails, whatever its link
        return "expected at least one level, got an empty list"
    if "X" in items:  # topo -m's diagonal: what no two GPUs, nor a GPU and a NIC, are to each other
        return "X is a device to itself in nvidia-smi topo -m, never a level between two devices"
    bad = [v for v in items if not isinstance(v, str) or not _LEVEL.match(v)]
    return f"expected levels as nvidia-smi topo -m prints them (NV18, PIX, PXB, PHB, NODE, SYS) or AMD link types " \
           f"(XGMI, PCIE), got {show(bad[0], 40)}" if bad else None


def _number_problem(key: str, number: object) -> str | None:
    """Why a numeric expectation cannot judge anything: too large for a float, not finite (an infinite
    temperature ceiling passes every GPU), negative (a negative floor passes everything), or 0 where
    the key needs a positive number (a line rate of 0 would pass anything). None for other types."""
    if not is_number(number):
        return None
    try:
        value = float(number)
    except OverflowError:  # an integer of hundreds of digits: no float, and no comparison worth making
        return f"expected a number of sensible size, got {show(number)}"
    if key in _POSITIVE:
        return None if math.isfinite(value) and value > 0 else f"expected {_POSITIVE[key]} above 0, got {fmt(value)}"
    if not math.isfinite(value):
        return f"expected a finite number, got {fmt(value)}"
    if key in _FLOORS and value == 0:  # below 0: the ">= 0" line below
        return f"expected a floor in GB/s above 0, got {fmt(number)}"
    if key == "p2p_uniformity" and not 0 < value < 1:
        # a spread of 1 (100%) or more passes a pair at 0 GB/s (-100% from the median); 0 fails every real matrix
        return f"expected a fraction of the median above 0 and below 1 (e.g. 0.10), got {fmt(number)}"
    return None if value >= 0 else f"expected a number >= 0, got {fmt(number)}"


def _range_problem(key: str, number: object) -> str | None:
    """Why a count or ceiling in _RANGES is outside what any node has (after _number_problem)."""
    if key not in _RANGES or not is_number(number):
        return None
    lo, hi, what = _RANGES[key]
    return None if lo <= number <= hi else f"expected {what} from {lo} to {hi}, got {fmt(number)}"


def parse_expect_args(items: list[str]) -> dict[str, Any]:
    """--expect KEY=VALUE (VALUE read as YAML, dotted keys nest: topology.gpu_gpu=NV18) -> checked mapping."""
    from clustercheck import yamlfile
    from clustercheck.schema import number_form

    raw: dict[str, Any] = {}
    given: dict[tuple[str, ...], str] = {}  # each key path typed so far -> the key as typed
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--expect {show(item)}: expected KEY=VALUE, e.g. nvlinks_per_gpu=18")
        _once(key, given)
        try:  # the suites' loader: a number or date PyYAML cannot build, or an alias bomb, is one line
            parsed = yamlfile.loads(value, "--expect") if value else ""
        except yamlfile.SyntaxProblem:
            parsed = value  # not YAML at all ([H100): the text as given
        except UserError as exc:
            raise UserError(exc.message, file="--expect", key=key) from None
        if key in VERSION_KEYS and is_number(parsed):
            parsed = value.strip()  # driver_min=535.10: the text as typed, before YAML's float drops the 0
        problem = number_form(value, parsed)
        if problem:
            raise UserError(problem, file="--expect", key=key)
        if isinstance(parsed, yamlfile.Mapping):
            parsed = dict(parsed)  # "--expect: key: ...", not "--expect:1:" (one line of text; no file)
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--expect {show(item)}: {show(part)} is not a mapping")
        node[parts[-1]] = parsed
    return check_expect(raw, "--expect", "") if raw else {}


def _once(key: str, given: dict[tuple[str, ...], str]) -> None:
    """A key typed twice, or one that holds or extends one typed before (`topology=...` after
    `topology.gpu_nic=...`), is refused: the last would win silently, the other value never judged."""
    path = tuple(key.split("."))
    for earlier, typed in given.items():
        if earlier[:len(path)] == path or path[:len(earlier)] == earlier:
            raise UserError(f"--expect {show(key)} given twice" + ("" if earlier == path else f" (after {show(typed)})"))
    given[path] = key


def _per_collective_problem(value: dict[Any, Any]) -> str | None:
    """A floor per collective: every key an nccl-tests collective, every value a number."""
    from clustercheck.toolout.nccl_run import NCCL_TESTS_COLLECTIVES  # here: toolout imports probes, which import us

    if not value:  # `busbw_min={}` typed would change no floor (merged), in a profile judge nothing
        return f"no floor given (empty mapping); give one per collective, e.g. {{all_reduce: 430}}, or a number"
    for name, floor in value.items():
        if name not in NCCL_TESTS_COLLECTIVES:
            return f"{show(name, 40)} is not a collective (one of {', '.join(NCCL_TESTS_COLLECTIVES)})"
        if not is_number(floor):  # the type first: str() of a list
            return f"{name}: expected a number of GB/s, got {show(floor, 40)}"  # nested by aliases is gigabytes
    return None


# keys whose mapping merges one level deep under a typed mapping (the others are replaced whole)
_MERGED = ("topology", "busbw_min", "busbw_min_multinode")


def merged(profile_expect: Mapping[str, Any], typed: Mapping[str, Any]) -> dict[str, Any]:
    """The expectations judged: the profile's with the typed ones over them, for probe and run alike. `topology`
    merges one level deep: `topology.gpu_nic=[PIX]` replaces the profile's gpu_nic and keeps its gpu_gpu (the
    whole block replaced would drop the profile's other levels unseen, and a pair it would fail would pass).
    So does a typed per-collective busbw floor: `busbw_min.all_reduce=100` keeps the profile's all_gather floor,
    which replaced would read `not judged` (the user changed one floor); a profile's single number is its floor
    for every collective. A typed number (`busbw_min=100`) is one floor for every collective: the whole key."""
    out = dict(profile_expect)
    for key, value in typed.items():
        below = out.get(key)
        if key in _MERGED and isinstance(value, dict) and below is not None:
            out[key] = {**_per_collective(key, below), **value}
        else:
            out[key] = value
    return out


def _per_collective(key: str, value: Any) -> dict[str, Any]:
    """A busbw floor as one per collective: a single number is the floor of every collective nccl-tests runs."""
    if isinstance(value, dict) or key == "topology":
        return dict(value)
    from clustercheck.toolout.nccl_run import NCCL_TESTS_COLLECTIVES  # here: toolout imports probes, which import us

    return dict.fromkeys(NCCL_TESTS_COLLECTIVES, value)


def typed_keys(typed: Mapping[str, Any]) -> list[str]:
    """The keys the user typed with --expect, a nested one by its path: `topology.gpu_nic=[PIX]` (or
    `topology={gpu_nic: ...}`) is `topology.gpu_nic`, which topo reads and amd-smi does not. Only `topology`
    nests keys; the mapping of `busbw_min` is values, one per collective."""
    out: list[str] = []
    for key, value in typed.items():
        nested = [f"{key}.{k}" for k in value if k in TOPOLOGY_KEYS] if key == "topology" else []
        out += nested or [key]
    return out


def reads(declared: Sequence[str], key: str) -> bool:
    """Whether a reader declaring the expect keys `declared` (a probe's expect_keys, a kind's) reads `key`. An
    entry names a key with every key nested in it ("topology"), or one nested key alone ("topology.gpu_gpu":
    amd-smi reads no other); "topology" typed is read by either. A typed --expect that nothing reads is refused,
    never run and passed (probes/cli.py, run/expect_read.py)."""
    return any(k == key or k.startswith(key + ".") or key.startswith(k + ".") for k in declared)

