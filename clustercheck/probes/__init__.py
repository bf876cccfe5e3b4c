"""System probes: read a tool's text (captured or live), parse it into frozen facts, judge them.

Every probe module defines `parse(text)`, `collect()` and `judge(parsed, expect)` and a `PROBE` entry.
`collect()` returns text (parsed by `parse`) or already-parsed facts, or raises `ProbeSkip` when the tool
or hardware is absent. Judging the same text offline (`clustercheck probe NAME --input FILE`) and live
gives the same verdicts. Nothing heavy is imported here: modules load only when a probe is asked for.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

# CLI name -> module under clustercheck.probes
_MODULES = {
    "versions": "versions",
    "env": "env",
    "pci-acs": "pci_acs",
    "pcie-link": "pcie_link",
    "topo": "topo",
    "numa": "numa",
    "nvlink": "nvlink",
    "ecc": "ecc",
    "throttle": "throttle",
    "gds": "gds",
    "ib": "ib",
    "nccl-tests": "nccl_tests",
    "nvbandwidth": "nvbandwidth",
}
NAMES: tuple[str, ...] = tuple(_MODULES)


class ProbeParseError(ValueError):
    """The text is not what the probe reads; the message says what was expected."""


class ProbeSkip(Exception):
    """The tool or hardware the probe needs is absent here; the message is the reason."""

    @property
    def reason(self) -> str:
        return str(self.args[0]) if self.args else "not applicable"


@dataclass(frozen=True)
class ProbeVerdict:
    subject: str          # what was judged: a bridge BDF "0000:02:08.0", "GPU3", "mlx5_0/1", "NCCL_P2P_DISABLE"
    what: str             # the property: "ACS redirect", "link width", "active NVLinks"
    passed: bool
    detail: str = ""      # one line a person can act on
    measured: object = None
    expected: object = None

    def line(self) -> str:
        return f"{self.subject}: {self.what}: {self.detail}" if self.detail else f"{self.subject}: {self.what}"


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    input_help: str       # what --input FILE must hold
    scope: str            # "node" or "gpu": what the verdicts are about
    parse: Callable[[str], Any]
    collect: Callable[[], Any]
    judge: Callable[[Any, Mapping[str, Any]], list[ProbeVerdict]]
    expect_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeOutcome:
    name: str
    outcome: str          # passed | failed | skipped | error
    verdicts: tuple[ProbeVerdict, ...] = ()
    reason: str = ""      # for skipped and error

    @property
    def failures(self) -> tuple[ProbeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.passed)


def get(name: str) -> Probe:
    module = _MODULES.get(name) or _MODULES.get(name.replace("_", "-"))
    if module is None:
        raise KeyError(f"no probe {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"clustercheck.probes.{module}").PROBE  # type: ignore[no-any-return]


def judge_text(probe: Probe, text: str, expect: Mapping[str, Any]) -> list[ProbeVerdict]:
    """Parse captured text and judge it; ProbeParseError propagates (bad input, not a verdict)."""
    return probe.judge(probe.parse(text), expect)


def run_live(probe: Probe, expect: Mapping[str, Any]) -> ProbeOutcome:
    """Collect on this machine and judge. A skip is `skipped`; a crash or unreadable output is `error`."""
    try:
        collected = probe.collect()
        parsed = probe.parse(collected) if isinstance(collected, str) else collected
        verdicts = tuple(probe.judge(parsed, expect))
    except ProbeSkip as exc:
        return ProbeOutcome(probe.name, "skipped", reason=exc.reason)
    except ProbeParseError as exc:
        return ProbeOutcome(probe.name, "error", reason=f"could not parse the live output: {exc}")
    except Exception as exc:  # a probe bug or an OS surprise is a harness error, never a hardware failure
        return ProbeOutcome(probe.name, "error", reason=f"{type(exc).__name__}: {exc}")
    if not verdicts:
        return ProbeOutcome(probe.name, "error", reason="the probe produced no verdict")
    return ProbeOutcome(probe.name, "passed" if all(v.passed for v in verdicts) else "failed", verdicts)


# -- helpers shared by parsers ---------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def evidence_lines(text: str) -> list[str]:
    """Lines of tool output: ANSI escapes removed, trailing spaces dropped, and a fixture's
    '# source: ...' line plus the blank line after it skipped (captured evidence carries its origin)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    if lines and lines[0].startswith("# source:"):
        lines = lines[2:] if len(lines) > 1 and not lines[1].strip() else lines[1:]
    return lines


# -- expectations (profile `expect:` blocks and --expect) --------------------------------------

# key -> (accepted types, help). Nested `topology` keys are in TOPOLOGY_KEYS.
EXPECT_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "gpu_count": ((int,), "GPUs the inventory and topology must show"),
    "gpu_model": ((str,), "text the GPU product name must contain, e.g. 'H100'"),
    "nvlinks_per_gpu": ((int,), "active NVLinks every GPU must have"),
    "topology": ((dict,), "GPU<->GPU and GPU<->NIC link levels as nvidia-smi topo -m prints them"),
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
    "h2d_min": ((int, float), "lowest nvbandwidth host_to_device_memcpy_ce/_sm value per GPU, GB/s"),
    "d2h_min": ((int, float), "lowest nvbandwidth device_to_host_memcpy_ce/_sm value per GPU, GB/s"),
    "p2p_min": ((int, float), "lowest nvbandwidth device_to_device_memcpy_read/write value per GPU pair, GB/s"),
    "p2p_uniformity": ((int, float), "every nvbandwidth GPU pair within this fraction of the median, e.g. 0.10"),
}
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
        value = f.get(key, kinds, None)
        if value is None:
            continue
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
            value = topo
        elif key == "nccl_env_allow" and not all(isinstance(v, str) for v in value):
            raise f.error(key, "expected a list of variable names such as [NCCL_P2P_DISABLE]")
        out[key] = value
    f.done()
    return out


_LEVEL = re.compile(r"^(X|SYS|NODE|PHB|PXB|PIX|NV\d+)$")


def _levels_problem(value: object) -> str | None:
    items = value if isinstance(value, list) else [value]
    bad = [v for v in items if not isinstance(v, str) or not _LEVEL.match(v)]
    import reprlib

    brief = reprlib.Repr()  # bounded: a YAML alias bomb must not become a gigabyte message
    brief.maxlevel, brief.maxlist, brief.maxstring, brief.maxother = 2, 4, 40, 40
    return f"expected levels as nvidia-smi topo -m prints them (NV18, PIX, PXB, PHB, NODE, SYS), got " \
           f"{brief.repr(bad[0])}" if bad else None


def parse_expect_args(items: list[str]) -> dict[str, Any]:
    """--expect KEY=VALUE (VALUE read as YAML, dotted keys nest: topology.gpu_gpu=NV18) -> checked mapping."""
    import yaml

    from clustercheck.errors import UserError

    raw: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"--expect {item!r}: expected KEY=VALUE, e.g. nvlinks_per_gpu=18")
        try:
            parsed = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            parsed = value
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise UserError(f"--expect {item!r}: {part} is not a mapping")
        node[parts[-1]] = parsed
    return check_expect(raw, "--expect", "") if raw else {}

