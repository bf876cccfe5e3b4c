"""What NCCL said it did: parse `NCCL_DEBUG=INFO` logs (`NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING`).

Pure text in, frozen facts out; no torch, nothing imported beyond the standard library. The input may
be one rank's `NCCL_DEBUG_FILE`, several ranks' files (pass them together), or NCCL lines interleaved
with other output (nccl-tests tables, mpirun `[0]` tags, a second line glued onto a table row).

Read (the formats NVIDIA/nccl prints at INIT, ENV and TUNING):

- the version line `NCCL version 2.21.5+cuda12.4`, and RCCL's (ROCm) banner `RCCL version : 2.27.7-HEAD:0d2c4fd`
  whose continuation lines `HIP version  : 7.2.26015-...` carry no prefix (RCCL keeps NCCL's `NCCL INFO`
  prefix and variable names);
- `NCCL WARN` messages, among them RCCL's own host checks ("NUMA auto balancing enabled ...",
  "Missing "iommu=pt" from kernel command line ...");
- the per-call tuning line rank 0 prints, in its three formats:
  >= 2.24  `AllReduce: 1073741824 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}`
           (NCCL itself prints the names upper case, `Algo NVLS_TREE proto SIMPLE`),
  2.23     `AllReduce: N Bytes -> Algo 4 proto 2 time T`,
  2.20-22  `N Bytes -> Algo 4 proto 2 time T` (no collective: taken from context where the log has
           one, see `Choice.collective_from`, else "unknown");
  <= 2.19 prints no tuning line, and then no algorithm is reported (never guessed);
- `NVLS multicast support is [not ]available on dev N`: capability, not use;
- `NCCL_ALGO set by environment to ...` and every other `NCCL_* set by environment to ...`;
- transports from `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read` lines; `via SHM` between two
  GPUs is flagged (`p2p_suspect`): on NVLink machines it means peer-to-peer is broken (ACS, VM, driver).

`summarise(parsed, collective, nbytes)` answers "which algorithm and protocol ran this collective at
this size, and over which transports".
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")  # NCCL_ALGO_* indices
PROTOS = ("LL", "LL128", "Simple")  # NCCL_PROTO_* indices
_ALGO_BY_KEY = {a.lower(): a for a in ALGOS}
_PROTO_BY_KEY = {p.lower(): p for p in PROTOS}

# NCCL's function names (ncclFuncToString) and the clustercheck / nccl-tests spellings that map to them.
FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv")
_FUNC_BY_KEY = {f.lower(): f for f in FUNCTIONS}
_FUNC_BY_KEY.update({"alltoall": "AllToAll", "sendrecv": "SendRecv", "gather": "Gather", "scatter": "Scatter"})

# One NCCL message; the optional `host:pid:tid [dev] ` prefix is NCCL's default (NCCL_DEBUG_FILE lines
# and stdout alike). Several may share a physical line when output streams interleave.
# The message's own text is found with str.find and its prefix looked for in a bounded window before it: a
# regex whose optional prefix starts at every position takes quadratic time on a long line without spaces.
# Numbers are bounded ({1,20}): int() of thousands of digits raises, and no log prints such a count.
_INFO = "NCCL INFO "
# Interleaved streams put a few messages on one physical line; past this many the rest of the line is read
# as the last message's text, so a line of megabytes of glued messages costs bounded work.
_MAX_MESSAGES = 256
_PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d{1,12}):(?P<tid>\d{1,12}) \[(?P<dev>\d{1,6})\] $")
_VERSION = re.compile(r"\bNCCL version (?P<version>\d+\.\d+\.\d+)(?:[+-](?P<build>(?:cuda|hip)[\d.]+))?")
_RCCL_VERSION = re.compile(r"\bRCCL version\s*:\s*(?P<version>\d+\.\d+\.\d+)(?:-(?P<head>[\w:]+))?")
_HIP_VERSION = re.compile(r"\bHIP version\s*:\s*(?P<version>\S+)")
_WARN = re.compile(r"\bNCCL WARN (?P<msg>(?:.*\S)?)\s*$")
_TUNING = re.compile(
    r"^(?:(?P<coll>[A-Za-z]+):\s+)?(?P<nbytes>\d{1,20}) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: channel\{Lo\.\.Hi\}=\{(?P<lo>\d{1,9})\.\.(?P<hi>\d{1,9})\})?(?: time (?P<time>\d{1,12}(?:\.\d{1,12})?))?")
_COLL_CALL = re.compile(r"^(?P<coll>[A-Za-z]+): opCount ")  # NCCL_DEBUG_SUBSYS=COLL, printed by every rank
# NCCL >= 2.7 "Channel 00/0 : 0[0] -> 1[1] ...", 2.5-2.6 "Ring 00 : 15[41000] -> 0[1b000] ...", 2.4 "Ring 00 : 15 -> 0 ..."
_CHANNEL = re.compile(
    r"^(?:Channel|Ring) (?P<channel>\d{1,9})(?:/\d{1,9})? : (?P<src>\d{1,9})(?:\[(?P<srcdev>[\da-fA-Fx]+)\])? -> "
    r"(?P<dst>\d{1,9})(?:\[(?P<dstdev>[\da-fA-Fx]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.*\S)\s*$")
_NVLS_CAP = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d{1,6})")
_ENV = re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>(?:.*\S)?)\s*$")
_NETWORK = re.compile(r"^Using network (?P<name>.*\S)\s*$")
_OFI_PROVIDER = re.compile(r"^NET/OFI Selected Provider is (?P<name>\S+)")
_CHANNEL_COUNTS = re.compile(r"^(?P<coll>\d{1,6}) coll channels, (?:(?P<collnet>\d{1,6}) collnet channels, )?"
                             r"(?P<nvls>\d{1,6}) nvls channels"
                             # RCCL: "comm:0x2bc1f840, nRanks:2, nNodes:1, coll channels:2 collnet channels:2, nvls channels:0"
                             r"|^comm:\S+ .*?coll channels:(?P<rcoll>\d{1,6}).*? nvls channels:(?P<rnvls>\d{1,6})")
# a via part holding another record ("NET/IB/0/GDRDMA Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/0");
# a via may hold a blank ("NET/AWS Libfabric/0", "P2P/direct pointer"), never these
_GLUED = re.compile(r" via |(?:^|\s)(?:Channel|Ring) \d")
# RCCL and NCCL >= 2.2x append the communicator; `(?<!\s)` starts `\s+` only at a run's first blank (linear)
_VIA_TAIL = re.compile(r"(?<!\s)\s+comm 0x[0-9a-fA-F]+ nRanks \d+$")
# nccl-tests names its binary in the banner ("# Collective test starting: all_reduce_perf") and users paste
# their command line: both say which collective a nameless (2.20-2.22) tuning line belongs to.
_TEST_BINARY = re.compile(r"\b(?P<name>all_reduce|all_gather|reduce_scatter|alltoall|broadcast|reduce|sendrecv|"
                          r"gather|scatter)_perf\w*")


@dataclass(frozen=True)
class Choice:
    """One tuning line: the algorithm and protocol NCCL chose for one call."""

    collective: str                    # NCCL's name ("AllReduce"), or "unknown"
    nbytes: int                        # as NCCL printed it
    algo: str                          # one of ALGOS, or "algo<N>" for an index this module does not know
    proto: str                         # one of PROTOS, or "proto<N>"
    channels: tuple[int, int] | None   # channel{Lo..Hi} (>= 2.24)
    time_us: float | None              # the tuning model's estimate (2.20-2.23)
    format: str                        # ">=2.24", "2.23" or "2.20-2.22"
    collective_from: str               # "line", "COLL line", "nccl-tests binary", "default", "unknown"
    host: str | None
    line: int                          # 1-based, in its text


@dataclass(frozen=True)
class Transport:
    """One `Channel ... via ...` connection line."""

    channel: int
    src_rank: int
    dst_rank: int
    src_dev: str            # "" in NCCL 2.4's "Ring 00 : 15 -> 0" lines
    dst_dev: str
    direction: str | None   # "send" / "receive" for network connections
    via: str                # as printed: "P2P/CUMEM/read", "SHM/direct/direct", "NET/IB/0/GDRDMA"
    host: str | None
    line: int

    @property
    def kind(self) -> str:
        """P2P, SHM, NVLS, CollNet ... or NET/<name> (NET/IB, NET/Socket, NET/IBext_v8, NET/OFI)."""
        parts = self.via.split("/")
        head = parts[0].strip()
        if head == "NET" and len(parts) > 1:
            return f"NET/{parts[1].strip()}"
        return head


@dataclass(frozen=True)
class NvlsCapability:
    dev: int
    available: bool
    host: str | None


@dataclass(frozen=True)
class NcclDebug:
    versions: tuple[str, ...]             # every distinct `NCCL version` seen, e.g. ("2.21.5+cuda12.4",)
    choices: tuple[Choice, ...]
    transports: tuple[Transport, ...]
    nvls: tuple[NvlsCapability, ...]
    env: tuple[tuple[str, str], ...]      # (name, value) per distinct setting, in order of first sight
    networks: tuple[str, ...]             # "IB", "Socket", "AWS Libfabric", "OFI provider efa"
    nvls_channels: tuple[int, ...]        # from "N coll channels, M nvls channels" lines
    info_lines: int                       # NCCL INFO messages read
    rccl_versions: tuple[str, ...] = ()   # RCCL's banner, e.g. ("2.27.7-HEAD:0d2c4fd",): the log is RCCL's
    hip_versions: tuple[str, ...] = ()    # the HIP runtime RCCL names under its banner
    warnings: tuple[str, ...] = ()        # distinct `NCCL WARN` messages, source location dropped
    garbled: tuple[tuple[str | None, int], ...] = ()  # (host, line) of channel lines with two records glued

    @property
    def is_rccl(self) -> bool:
        return bool(self.rccl_versions)

    @property
    def numa_balancing_on(self) -> bool | None:
        """RCCL warns at init when kernel.numa_balancing is on; None for a log that cannot say (NCCL's)."""
        if any("NUMA auto balancing enabled" in w for w in self.warnings):
            return True
        return False if self.is_rccl else None

    @property
    def iommu_pt_missing(self) -> bool | None:
        """RCCL warns at init when the kernel command line lacks iommu=pt (ROCm >= 7)."""
        if any('"iommu=pt"' in w for w in self.warnings):
            return True
        return None

    @property
    def version(self) -> str | None:
        """`2.21.5` (without the build suffix) when every version line agrees; None if none was printed."""
        plain = {v.split("+")[0] for v in self.versions}
        return plain.pop() if len(plain) == 1 else None

    @property
    def build(self) -> str | None:
        """`cuda12.4` from `2.21.5+cuda12.4` when the log says."""
        builds = {v.split("+", 1)[1] for v in self.versions if "+" in v}
        return builds.pop() if len(builds) == 1 else None

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def transport_kinds(self) -> frozenset[str]:
        return frozenset(t.kind for t in self.transports)

    @property
    def shm_between_gpus(self) -> tuple[Transport, ...]:
        """Connections between two GPUs that go through host shared memory instead of P2P."""
        return tuple(t for t in self.transports if t.kind == "SHM")

    @property
    def p2p_suspect(self) -> bool:
        """True when some GPU pair talks through SHM. On an NVLink/NVSwitch machine that means P2P is
        broken (ACS redirect, a VM without P2P, driver); on PCIe GPUs across CPU sockets it can be NCCL's
        normal choice, so this is a sign to look at, not a verdict."""
        return bool(self.shm_between_gpus)

    @property
    def nvls_capable(self) -> bool | None:
        """Whether some device reported NVLS multicast available; None when the log has no such line.
        Capability only: NCCL may still not use NVLS (e.g. below its GPU-count threshold)."""
        if not self.nvls:
            return None
        return any(c.available for c in self.nvls)

    def table(self) -> dict[tuple[str, int], tuple[str, str]]:
        """(collective, nbytes) -> the (algo, proto) chosen most often at that size."""
        counts: dict[tuple[str, int], Counter[tuple[str, str]]] = {}
        for c in self.choices:
            counts.setdefault((c.collective, c.nbytes), Counter())[(c.algo, c.proto)] += 1
        return {key: counter.most_common(1)[0][0] for key, counter in sorted(counts.items())}


def _algo(text: str) -> str:
    if text.isascii() and text.isdigit() and len(text) < 6:
        i = int(text)
        return ALGOS[i] if i < len(ALGOS) else f"algo{i}"
    return _ALGO_BY_KEY.get(text.replace("_", "").lower(), text)


def _proto(text: str) -> str:
    if text.isascii() and text.isdigit() and len(text) < 6:
        i = int(text)
        return PROTOS[i] if i < len(PROTOS) else f"proto{i}"
    return _PROTO_BY_KEY.get(text.lower(), text)


def function_name(collective: str) -> str:
    """NCCL's name for a collective spelled any common way: all_reduce, allreduce, AllReduce -> AllReduce."""
    key = collective.replace("_", "").replace("-", "").lower()
    return _FUNC_BY_KEY.get(key, collective)


def _messages(line: str) -> Iterable[tuple[str | None, str | None, str]]:
    """(host, pid, message) for each `NCCL INFO` message on a physical line."""
    found: list[tuple[int, int, str | None, str | None]] = []   # (start, end of "NCCL INFO ", host, pid)
    at = line.find(_INFO)
    while at >= 0 and len(found) < _MAX_MESSAGES:
        before = max(found[-1][1] if found else 0, at - 300)
        m = _PREFIX.search(line, before, at)
        found.append((m.start() if m else at, at + len(_INFO), m.group("host") if m else None,
                      m.group("pid") if m else None))
        at = line.find(_INFO, at + len(_INFO))
    for i, (_, end_of, host, pid) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(line)
        yield host, pid, line[end_of:end].rstrip()


messages = _messages  # for the other readers of NCCL's lines (nccl_net.py)
PREFIX = _PREFIX


def parse(texts: str | Iterable[str], default_collective: str | None = None) -> NcclDebug:
    """Parse one log text, or several (one per rank's file: context does not carry across texts).

    `default_collective` names the collective of nameless (2.20-2.22) tuning lines when the log itself
    does not say (e.g. the caller ran all_reduce); it never overrides a name the log gives."""
    if isinstance(texts, str):
        texts = [texts]
    default = function_name(default_collective) if default_collective else None
    versions: list[str] = []
    choices: list[Choice] = []
    transports: list[Transport] = []
    nvls: dict[tuple[str | None, int], NvlsCapability] = {}
    env: dict[str, str] = {}
    networks: list[str] = []
    nvls_channels: list[int] = []
    rccl: list[str] = []
    hip: list[str] = []
    warnings: list[str] = []
    garbled: list[tuple[str | None, int]] = []
    info_lines = 0
    for text in texts:
        last_call: dict[tuple[str | None, str | None], str] = {}  # (host, pid) -> last COLL-line collective
        last_any_call: str | None = None
        binary: str | None = None
        for number, line in enumerate(text.splitlines(), 1):
            # each pattern only where its words are: a dozen regex scans of every line cost seconds on a
            # log of megabytes, and a plain substring test is a fast scan
            for v in _VERSION.finditer(line) if "NCCL version" in line else ():
                full = v.group("version") + (f"+{v.group('build')}" if v.group("build") else "")
                if full not in versions:
                    versions.append(full)
            r = _RCCL_VERSION.search(line) if "RCCL version" in line else None
            if r:
                banner = r.group("version") + (f"-{r.group('head')}" if r.group("head") else "")
                rccl.extend([banner] if banner not in rccl else [])
                versions.extend([r.group("version")] if r.group("version") not in versions else [])
            h = _HIP_VERSION.search(line) if "HIP version" in line else None
            if h and h.group("version") not in hip:
                hip.append(h.group("version"))
            warn = _WARN.search(line) if "NCCL WARN " in line else None
            if warn and warn.group("msg") not in warnings:
                warnings.append(warn.group("msg"))
            if "NCCL INFO " not in line:
                b = _TEST_BINARY.search(line) if "_perf" in line else None
                if b:
                    binary = function_name(b.group("name"))
                continue
            head = line[:line.find("NCCL INFO ")]
            b = _TEST_BINARY.search(head) if "_perf" in head else None  # a table row or command glued before the NCCL message
            if b:
                binary = function_name(b.group("name"))
            for host, pid, msg in _messages(line):
                info_lines += 1
                m = _TUNING.match(msg)
                if m:
                    if m.group("coll"):
                        coll, source = function_name(m.group("coll")), "line"
                    elif (host, pid) in last_call or last_any_call:
                        coll, source = last_call.get((host, pid), last_any_call) or "unknown", "COLL line"
                    elif binary:
                        coll, source = binary, "nccl-tests binary"
                    elif default:
                        coll, source = default, "default"
                    else:
                        coll, source = "unknown", "unknown"
                    lo, hi = m.group("lo"), m.group("hi")
                    fmt = ">=2.24" if lo is not None else ("2.23" if m.group("coll") else "2.20-2.22")
                    choices.append(Choice(
                        collective=coll, nbytes=int(m.group("nbytes")), algo=_algo(m.group("algo")),
                        proto=_proto(m.group("proto")), channels=(int(lo), int(hi)) if lo is not None else None,
                        time_us=float(m.group("time")) if m.group("time") else None, format=fmt,
                        collective_from=source, host=host, line=number))
                    continue
                m = _COLL_CALL.match(msg)
                if m:
                    last_call[(host, pid)] = last_any_call = function_name(m.group("coll"))
                    continue
                m = _CHANNEL.match(msg)
                if m:
                    via = _VIA_TAIL.sub("", m.group("via"))
                    if _GLUED.search(via):  # two records on one line: neither's transport can be told
                        garbled.append((host, number))
                        continue
                    transports.append(Transport(
                        channel=int(m.group("channel")), src_rank=int(m.group("src")), dst_rank=int(m.group("dst")),
                        src_dev=m.group("srcdev") or "", dst_dev=m.group("dstdev") or "", direction=m.group("dir"),
                        via=via, host=host, line=number))
                    continue
                m = _NVLS_CAP.match(msg)
                if m:
                    cap = NvlsCapability(int(m.group("dev")), not m.group("not"), host)
                    nvls.setdefault((host, cap.dev), cap)
                    continue
                m = _ENV.match(msg)
                if m:
                    value = m.group("value")
                    value = value[:-1] if value.endswith(".") else value  # "set by environment to 0."
                    env.setdefault(m.group("name"), value)
                    continue
                m = _NETWORK.match(msg) or _OFI_PROVIDER.match(msg)
                if m:
                    name = m.group("name") if m.re is _NETWORK else f"OFI provider {m.group('name')}"
                    if name not in networks:
                        networks.append(name)
                    continue
                m = _CHANNEL_COUNTS.match(msg)
                if m:
                    nvls_channels.append(int(m.group("nvls") or m.group("rnvls")))
    return NcclDebug(versions=tuple(versions), choices=tuple(choices), transports=tuple(transports),
                     nvls=tuple(nvls.values()), env=tuple(env.items()), networks=tuple(networks),
                     nvls_channels=tuple(nvls_channels), info_lines=info_lines, rccl_versions=tuple(rccl),
                     hip_versions=tuple(hip), warnings=tuple(warnings), garbled=tuple(garbled))


@dataclass(frozen=True)
class Summary:
    """The algorithm/protocol NCCL used for one collective at (or just below) one size, and the transports."""

    collective: str
    nbytes: int                            # the size asked about
    matched_nbytes: int | None             # the logged size used: the largest at or below `nbytes`
    algo: str | None                       # None when the log has no tuning line for it (never guessed)
    proto: str | None
    alternatives: tuple[tuple[str, str, int], ...]  # every (algo, proto, calls) seen at that size
    transports: frozenset[str]
    p2p_suspect: bool
    nvls_capable: bool | None
    version: str | None

    @property
    def label(self) -> str:
        """`NVLS/Simple`, or `unknown` when NCCL did not say."""
        return f"{self.algo}/{self.proto}" if self.algo else "unknown"


def summarise(parsed: NcclDebug, collective: str, nbytes: int) -> Summary:
    """What NCCL chose for `collective` at the logged size closest at or below `nbytes`."""
    name = function_name(collective)
    sizes = sorted({c.nbytes for c in parsed.choices if c.collective == name and c.nbytes <= nbytes})
    matched = sizes[-1] if sizes else None
    seen = Counter((c.algo, c.proto) for c in parsed.choices if c.collective == name and c.nbytes == matched)
    ranked = seen.most_common()
    algo, proto = ranked[0][0] if ranked else (None, None)
    return Summary(collective=name, nbytes=nbytes, matched_nbytes=matched, algo=algo, proto=proto,
                   alternatives=tuple((a, p, n) for (a, p), n in ranked), transports=parsed.transport_kinds,
                   p2p_suspect=parsed.p2p_suspect, nvls_capable=parsed.nvls_capable, version=parsed.version)
