"""NCCL's transport between nodes, asserted: the network it used (`net`), whether GPUDirect RDMA carried
it (`gdr`) and how many NICs each node put to work (`nics`), from the per-host facts of
fabric/nccl_net.py. Shared by `clustercheck probe nccl-log` (a capture) and the live collectives (each
rank's own log). A failure names its cause and the usual culprit; a capture without the lines a property
needs says so (`not judged: no channel lines`), never passes.

What is judged on what (NCCL prints these; see nccl_net.py):
- net: the channel lines' network (`via NET/Socket/0` is a fall-back to TCP). `Using network Socket`
  alone is enough to fail an IB expectation, and so is `NET/IB : No device found` on any host; passing needs
  channel lines on every node judged (`Using network IB` is a choice, not traffic). A `NET/Socket : Using` init
  line alone is NCCL probing its networks, no fall-back.
- gdr: receive-side network channels with or without `/GDRDMA`, and NCCL >= 2.19's
  `Connected all rings, use ring PXN p GDR g` (GDR 1 only on a host with network channels: NCCL lowers its
  useGdr only for a network connection; GDR 0 counts anywhere). Send-side channels without it are GPUDirect reads,
  which NCCL_NET_GDR_READ decides, and do not fail it.
- nics: per host, the distinct network devices on its channel lines, and the NICs NCCL listed when it
  found them (`NET/IB : Using [0]mlx5_0:1/IB ...`): fewer listed than expected fails without channels.
- errors, judged whatever is expected: every `NCCL WARN` (`NET/IB : Got completion with error 4 ...`,
  `Cuda failure ...` from enqueue.cc, the proxy's service thread; each one of a line with several) and
  NCCL's error-return trace (`NCCL INFO transport/net.cc:1067 -> 6`, any nonzero code) fail, per host, quoting
  the first line: a log whose channels showed GDRDMA and whose traffic then failed passes nothing. The one
  WARN tolerated is RCCL's `NUMA auto balancing enabled` notice at init, a host setting amd-host judges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import hostlist

from clustercheck.fabric import nccl_debug
from clustercheck.fabric.nccl_net import HostNet

FAMILIES = {"ib": "IB", "ibext": "IB", "roce": "IB", "socket": "Socket", "ofi": "OFI", "efa": "OFI",
            "libfabric": "OFI", "aws libfabric": "OFI"}


def family(net: str) -> str:
    """IB (IB, IBext, IBext_v8, RoCE through NET/IB), Socket, OFI (AWS Libfabric, Libfabric, OFI
    provider efa), else the name as printed."""
    n = net.strip().lower()
    if n.startswith("ofi provider"):
        return "OFI"
    if n.startswith("ibext") or n == "ib" or n.startswith("ib_") or n.startswith("ibext_v"):
        return "IB"
    return FAMILIES.get(n, net.strip())


@dataclass(frozen=True)
class Finding:
    subject: str
    what: str                  # "network", "GPUDirect RDMA", "NICs per node", "transport"
    passed: bool | None        # None: not judged
    detail: str
    measured: object = None
    expected: object = None


def _hosts(names: list[str]) -> str:
    named = [n for n in names if n]
    shown = hostlist.collect_hostlist(named) if named else ""
    if not shown:
        return "lines without a host name"
    return shown + (" and lines without a host name" if "" in names else "")


def judge(hosts: Mapping[str, HostNet], env: Mapping[str, str], expect: Mapping[str, Any],
          nodes: Sequence[str] = ()) -> list[Finding]:
    """`nodes`: the nodes whose ranks' logs were read (a live run's nodes, a capture's hosts): one whose log
    shows no network channel, no GPUDirect RDMA either way or no NIC its channels used keeps that property
    from passing on the other nodes' lines (not judged, by name); a failure elsewhere still fails."""
    out: list[Finding] = []
    glued = "; ".join(f"line {', '.join(map(str, h.garbled[:3]))}{' ...' if len(h.garbled) > 3 else ''} on "
                      f"{h.host or 'lines without a host name'}" for h in hosts.values() if h.garbled)
    for key, finding in (("net", lambda: _net(hosts, env, str(expect["net"]), nodes)),
                         ("gdr", lambda: _gdr(hosts, env, bool(expect["gdr"]), nodes))):
        if expect.get(key) is None:
            continue
        f = finding()
        if glued and f.passed is not False:  # a glued record may hide a fall-back: never passed
            f = Finding(f.subject, f.what, None, f"not judged: garbled channel line(s), two channel records glued "
                        f"on one line ({glued}): the transport of each cannot be told", None, f.expected)
        out.append(f)
    if expect.get("nics") is not None:
        out.append(_nics(hosts, env, int(expect["nics"]), nodes))
    return out


NO_CHANNELS = "no channel lines"


def p2p_findings(transports: Iterable[nccl_debug.Transport], offset: int = 0) -> list[Finding]:
    """Expectation `p2p: true`: a host whose GPUs connect through SHM (host shared memory) instead of P2P
    fails, naming the ranks; NVLink/NVSwitch GPUs that fall back to SHM have P2P broken (ACS redirect, a VM
    without P2P, NCCL_P2P_DISABLE, the driver). `offset`: lines before the text (a capture's source note)."""
    shm: dict[str, list[nccl_debug.Transport]] = {}
    p2p: set[str] = set()
    for t in transports:
        if t.kind == "SHM":
            shm.setdefault(t.host or "", []).append(t)
        elif t.kind == "P2P":
            p2p.add(t.host or "")
    out = []
    for host, lines in shm.items():
        pairs = sorted({(t.src_rank, t.dst_rank) for t in lines})
        shown = ", ".join(f"{a} -> {b}" for a, b in pairs[:6]) + (f" and {len(pairs) - 6} more" if len(pairs) > 6 else "")
        out.append(Finding(host or "NCCL", "P2P between GPUs", False, f"SHM between ranks {shown} on "
                           f"{host or 'lines without a host name'} (line {lines[0].line + offset}, {len(lines)} channel "
                           f"line(s)), P2P expected: peer-to-peer is broken there (ACS redirect, a VM without P2P, "
                           f"NCCL_P2P_DISABLE, the driver)", len(pairs), 0))
    if out:
        return out
    if not p2p:
        return [Finding("NCCL", "P2P between GPUs", None, "not judged: no channel line between two GPUs of one host "
                        "(P2P or SHM)", None, "P2P")]
    return [Finding("NCCL", "P2P between GPUs", True, f"P2P between the GPUs of {_hosts(sorted(p2p))}, no SHM",
                    "P2P", "P2P")]

# NCCL's trace of a failed call, printed where the error passes up: "transport/net.cc:1067 -> 6" (ncclResult_t)
_RETURN = re.compile(r"^(?P<where>[\w./+-]{1,200}\.(?:cc|cu|c|cpp|h)):\d{1,9} -> (?P<code>\d{1,4})\b")
_WARN_PREFIX = re.compile(r"(?P<host>[^\s:\[\]]+):\d{1,12}:\d{1,12} \[(?P<dev>\d{1,6})\]")
_WARN_AT = "NCCL WARN "
_TOLERATED = re.compile(r"NUMA auto balancing enabled\b")  # RCCL's init notice: a host setting, amd-host's
# where NCCL's network code lives: transport/net*.cc, net_ib, a net plugin (ib_plugin.c, nccl_ofi_*), the sockets
_NET_SOURCE = re.compile(r"transport/|(?:^|/)(?:net|ib|socket|ibvwrap|nccl_ofi|\w*plugin)[\w.]*:\d+$")


@dataclass(frozen=True)
class ErrorLine:
    """One warning or error-return trace NCCL printed."""

    host: str      # "" where the line carries no host name
    dev: str       # NCCL's [cudaDev], "" where not printed
    line: int      # 1-based, in its text
    text: str      # the message as printed ("NET/IB : Got completion with error 4, ...", "transport/net.cc:1067 -> 6")
    count: int = 1  # lines with the same host and text
    rank: int | None = None  # the rank whose own log said it (a run's ranks); None in a capture


def errors(texts: str | Iterable[str]) -> tuple[ErrorLine, ...]:
    """Every NCCL WARN (each one of a line with several) and every nonzero error-return trace, per (host, text).
    The one WARN tolerated is RCCL's NUMA-balancing notice at init, a host setting that amd-host judges
    (docs/fabric.md)."""
    found: dict[tuple[str, str], ErrorLine] = {}
    for text in [texts] if isinstance(texts, str) else texts:
        for number, line in enumerate(text.splitlines(), 1):
            hits: list[tuple[str, str, str]] = []
            at, seen = line.find(_WARN_AT), 0
            while at >= 0 and seen < 256:  # bounded work on a line of megabytes of glued warnings
                after, seen = line.find(_WARN_AT, at + len(_WARN_AT)), seen + 1
                msg = line[at + len(_WARN_AT):after if after >= 0 else len(line)]
                nxt = min((i for i in (msg.find("NCCL INFO "), len(msg) if after >= 0 else -1) if i >= 0), default=-1)
                if nxt >= 0:  # the next message's own "host:pid:tid [dev]" is not this one's
                    glued = _WARN_PREFIX.search(msg, max(0, nxt - 300), nxt)
                    msg = msg[:glued.start()] if glued else msg[:nxt]
                msg = msg.strip()
                m = _WARN_PREFIX.search(line, max(0, at - 300), at)
                if not _TOLERATED.match(msg):
                    hits.append((m.group("host") if m else "", m.group("dev") if m else "", msg or "(empty warning)"))
                at = after
            if " -> " in line and "NCCL INFO " in line:
                for host, _pid, msg in nccl_debug.messages(line):
                    r = _RETURN.match(msg)
                    if r and int(r.group("code")) != 0:
                        end = line.find(msg)
                        m = _WARN_PREFIX.search(line, max(0, end - 300), end)
                        hits.append((host or "", m.group("dev") if m else "", msg))
            for host, dev, msg in hits:
                key = (host, msg)
                old = found.get(key)
                found[key] = ErrorLine(host, dev, number, msg[:300]) if old is None else \
                    ErrorLine(old.host, old.dev, old.line, old.text, old.count + 1)
    return tuple(found.values())


def last_error_finding(subject: str, last_error: str | None) -> list[Finding]:
    """nccl-tests' `# error: ...` line after its footer, ncclGetLastError() (NVIDIA/nccl-tests src/util.cu
    writeErrors; `errors` in -J JSON): NCCL's last warning, there without NCCL_DEBUG. It fails the run, but for
    the one warning errors() tolerates."""
    said = (last_error or "").strip()[:300]
    if not said or _TOLERATED.match(said):
        return []
    return [Finding(subject, "NCCL errors", False, f"nccl-tests printed NCCL's last error after its footer (# error): "
                    f"\"{said}\": NCCL reported an error during the run, its results cannot be trusted", said, "none")]


def _on_network(text: str) -> bool:
    r = _RETURN.match(text)
    return text.startswith("NET/") or bool(r and _NET_SOURCE.search(f"{r.group('where')}:0"))


def error_findings(found: Sequence[ErrorLine], subject: str = "", last_error: str | None = None) -> list[Finding]:
    """A failed finding per host whose NCCL printed a warning or an error return, and nccl-tests' `# error:` line
    (last_error_finding, under `subject`) where it is not one of them: NCCL's last error is its last WARN's words,
    so one fault is one failure, and the `# error:` words are kept on the WARN's where they say more."""
    said = " ".join((last_error or "").split())[:300]
    same = next((e for e in found if said and (said.startswith(w := " ".join(e.text.split())) or w.startswith(said))),
                None)
    by_host: dict[str, list[ErrorLine]] = {}
    for e in found:
        by_host.setdefault(e.host, []).append(e)
    out = []
    for host, lines in by_host.items():
        warns = [e for e in lines if not _RETURN.match(e.text)]
        returns = [e for e in lines if _RETURN.match(e.text)]
        first = (warns or lines)[0]
        ranks = sorted({e.rank for e in lines if e.rank is not None})
        where = f"{host or 'lines without a host name'}" + (f" GPU [{first.dev}]" if first.dev else "") + \
            (f" (rank {', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''})" if ranks else "")
        more = sum(e.count for e in lines) - 1 - (1 if warns and returns else 0)
        what = "NCCL WARN" if warns else "error return"
        out.append(Finding(host or "NCCL", "NCCL errors", False,
                           f"{what} on {where}{f' (line {first.line})' if first.line else ''}: \"{first.text}\""
                           + (f", then \"{returns[0].text}\"" if warns and returns else "")
                           + (f"; {more} more error line(s)" if more else "")
                           + ("; NCCL reported an error on its network path there: channel lines show what was set "
                              "up, not that it worked" if _on_network(first.text) else "; NCCL reported an error "
                              "there: the collective's results cannot be trusted")
                           + ("" if same is None or same.host != host else "; nccl-tests printed it again after its "
                              "footer (# error)" + ("" if said == first.text else f": \"{said}\"")),
                           sum(e.count for e in lines), 0))
    return out + ([] if same else last_error_finding(subject, last_error))


def _net_culprit(hosts: Mapping[str, HostNet], env: Mapping[str, str], got: str) -> str:
    found = []
    if env.get("NCCL_IB_DISABLE", "").strip() == "1":
        found.append("NCCL_IB_DISABLE=1 (set by environment) turns NCCL's IB transport off")
    if env.get("NCCL_NET"):
        found.append(f"NCCL_NET={env['NCCL_NET']} (set by environment) picks the network")
    if any(h.libibverbs_missing for h in hosts.values()):
        found.append("libibverbs was not found (Failed to open libibverbs.so): the image lacks the RDMA user libraries")
    noib = [h.host for h in hosts.values() if h.no_ib_device]
    if noib:
        found.append(f"NET/IB : No device found on {_hosts(noib)}: no RDMA device visible to the ranks "
                     f"(no /dev/infiniband in the container, the driver not loaded, or NCCL_IB_HCA naming none)")
    if env.get("NCCL_IB_HCA"):
        found.append(f"NCCL_IB_HCA={env['NCCL_IB_HCA']} may name no present device")
    if found:
        return "; ".join(found)
    if got == "Socket":
        return ("the usual culprits: NCCL_IB_DISABLE=1, NCCL_NET=Socket, libibverbs missing in the image, no "
                "/dev/infiniband in the container, NCCL_IB_HCA naming absent devices")
    return "the usual culprit: a network plugin (NCCL_NET_PLUGIN, libnccl-net.so) other than the one expected"


def _net(hosts: Mapping[str, HostNet], env: Mapping[str, str], want: str, nodes: Sequence[str]) -> Finding:
    wanted = family(want)
    bad: dict[str, list[str]] = {}   # host -> networks seen that are not the expected one
    good_channels: list[str] = []
    chose_only: list[str] = []
    for h in hosts.values():
        # every rank's choice counts: a sibling rank's IB channels on the host do not hide one `Using network Socket`
        seen = tuple(dict.fromkeys((*h.nets_used, *h.networks)))
        wrong = [n for n in seen if family(n) != wanted]
        if wrong:
            bad[h.host] = wrong
        elif h.nets_used:
            good_channels.append(h.host)
        elif h.networks:
            chose_only.append(h.host)
    # NCCL found no RDMA device there: that host cannot have used IB, whatever the others' channels show
    noib = [h.host for h in hosts.values() if h.no_ib_device and h.host not in bad] if wanted == "IB" else []
    if bad or noib:
        got = family(next(iter(bad.values()))[0]) if bad else "Socket"
        nets = sorted({n for v in bad.values() for n in v})
        how = "channel lines" if any(n in hosts[h].nets_used for h in bad for n in bad[h]) else "'Using network' lines"
        fell = " fell back to TCP sockets:" if got == "Socket" and bad else ""
        pids = sorted({f"{h} pid {p}" for h in bad for n, p in hosts[h].network_pids if n in bad[h]})
        shown = [f"NCCL{fell} {how} show {', '.join(nets)} on {_hosts(list(bad))}"
                 + (f" ({', '.join(pids[:6])}{' ...' if len(pids) > 6 else ''})" if pids else "")] if bad else []
        shown += [f"NCCL found no IB device on {_hosts(noib)} (NET/IB : No device found.)"] if noib else []
        return Finding("NCCL", "network", False, f"{'; '.join(shown)}, {want} expected; {_net_culprit(hosts, env, got)}",
                       ", ".join(nets) or "no IB device", want)
    if not good_channels:
        what = f" (only 'Using network' on {_hosts(chose_only)})" if chose_only else ""
        return Finding("NCCL", "network", None, f"not judged: {NO_CHANNELS}{what}: the log does not show traffic "
                       f"over the network", None, want)
    # a node without network channel lines is not shown to use the network (a `Using network IB` line is NCCL's
    # choice, not traffic): never passed on the others' lines
    silent = [n for n in dict.fromkeys(nodes) if n not in hosts or not hosts[n].nets_used]
    if silent:
        return Finding("NCCL", "network", None, f"not judged: no network line read from the NCCL log of "
                       f"{_hosts(silent)} (no channel line via the network there; channels via the network on "
                       f"{_hosts(good_channels)})", None, want)
    used = sorted({n for h in good_channels for n in hosts[h].nets_used})
    return Finding("NCCL", "network", True, f"channels via NET/{', NET/'.join(used)} on {_hosts(good_channels)}",
                   ", ".join(used), want)


def _gdr_culprit(hosts: Mapping[str, HostNet], env: Mapping[str, str]) -> str:
    said = sorted({r for h in hosts.values() for r in h.gdr_disabled})
    found = [f"NCCL: GPU Direct RDMA Disabled for {said[0]}" + (f" (and {len(said) - 1} more)" if len(said) > 1 else "")] \
        if said else []
    if any("distance" in r for r in said) or env.get("NCCL_NET_GDR_LEVEL"):
        level = env.get("NCCL_NET_GDR_LEVEL")
        found.append(f"NCCL_NET_GDR_LEVEL{'=' + level if level else ''}: the GPU-NIC PCI distance is beyond the level "
                     f"NCCL allows GPUDirect RDMA at (nvidia-smi topo -m shows the distance)")
    if not found or not any("distance" in r for r in said):
        found.append("the usual culprit: nvidia_peermem not loaded (lsmod | grep nvidia_peermem) and no dma-buf "
                     "(NVIDIA's open kernel modules on Linux >= 5.12)")
    return "; ".join(found)


def _silent(nodes: Sequence[str], hosts: Mapping[str, HostNet], said: Iterable[str]) -> list[str]:
    """The nodes of a run whose logs said nothing of a property: absent from `hosts` or not in `said`."""
    told = set(said)
    return [n for n in dict.fromkeys(nodes) if n not in hosts or n not in told]


def _gdr(hosts: Mapping[str, HostNet], env: Mapping[str, str], want: bool, nodes: Sequence[str] = ()) -> Finding:
    on, off, sockets = [], [], []
    for h in hosts.values():
        if h.nets_used and all(family(n) == "Socket" for n in h.nets_used):
            sockets.append(h.host)
        elif h.gdr is True:
            on.append(h.host)
        elif h.gdr is False:
            off.append(h.host)
    if want and (off or sockets):
        why = []
        if off:
            counts = [f"{hosts[x].recv_gdr[1]} of {sum(hosts[x].recv_gdr)} receive channel(s)" for x in off
                      if sum(hosts[x].recv_gdr)]
            flags = [x for x in off if any(g == 0 for _, g in hosts[x].ring_flags)]
            why.append(f"network channels without GDRDMA on {_hosts(off)}"
                       + (f" ({counts[0]})" if counts else "") + ("; NCCL says GDR 0" if flags else ""))
        if sockets:
            why.append(f"the network is Socket on {_hosts(sockets)}: no GPUDirect RDMA over TCP")
        return Finding("NCCL", "GPUDirect RDMA", False, f"{'; '.join(why)}, GPUDirect RDMA expected; "
                       f"{_gdr_culprit(hosts, env) if off else 'see the network verdict'}", "off", "on")
    if not want and on:
        return Finding("NCCL", "GPUDirect RDMA", False, f"network channels use GDRDMA on {_hosts(on)}, "
                       f"GPUDirect RDMA expected off", "on", "off")
    if not on and not off and not sockets:
        return Finding("NCCL", "GPUDirect RDMA", None, f"not judged: {NO_CHANNELS} over the network (no receive-side "
                       f"channel, and no 'use ring PXN p GDR g' line beside network channels)", None,
                       "on" if want else "off")
    silent = _silent(nodes, hosts, on + off + sockets)
    if silent:  # as _net: a node whose log shows no GDR either way is not shown to have it; never passed on the others
        return Finding("NCCL", "GPUDirect RDMA", None, f"not judged: no receive-side network channel and no 'use ring "
                       f"PXN p GDR g' line read from the NCCL log of {_hosts(silent)} ("
                       f"{f'GDRDMA on {_hosts(on)}' if on else f'no GDRDMA on {_hosts(off + sockets)}'})", None, "on" if want else "off")
    state = "on" if on else "off"
    sends = [x for x in on if hosts[x].send_gdr[1]]
    note = f"; send side without GDRDMA on {_hosts(sends)} (GPUDirect reads: NCCL_NET_GDR_READ)" if sends else ""
    where = f"network channels with GDRDMA on {_hosts(on)}" if on else f"no GDRDMA on {_hosts(off + sockets)}"
    return Finding("NCCL", "GPUDirect RDMA", True, f"{state}: {where}{note}", state,
                   "on" if want else "off")


def _nics(hosts: Mapping[str, HostNet], env: Mapping[str, str], want: int, nodes: Sequence[str] = ()) -> Finding:
    short: list[str] = []
    judged: list[str] = []
    for h in hosts.values():
        if h.nics_found and len(h.nics_found) < want:
            short.append(f"NCCL found {len(h.nics_found)} NIC(s) on {h.host or 'the log'} "
                         f"({', '.join(n.split(':')[0] for n in h.nics_found)})")
        elif h.nics_used and len(h.nics_used) < want:
            short.append(f"{len(h.nics_used)} NIC(s) carried the network channels on {h.host or 'the log'} "
                         f"({', '.join(sorted(h.nics_used))})")
        elif h.nics_used:
            judged.append(h.host)
    if short:
        culprits = ([f"NCCL_IB_HCA={env['NCCL_IB_HCA']} (set by environment) limits the NICs"]
                    if env.get("NCCL_IB_HCA") else []) + \
            ["the usual culprits: NCCL_IB_HCA naming fewer NICs, ports down (ibstat: State Down), or GPUs without "
             "a NIC near them (NCCL_CROSS_NIC, the PCI topology)"]
        return Finding("NCCL", "NICs per node", False, f"{'; '.join(short[:3])}"
                       + (f"; and {len(short) - 3} more" if len(short) > 3 else "") + f"; {want} expected per node; "
                       + "; ".join(culprits), min(len(hosts[h].nics_used) or len(hosts[h].nics_found)
                                                  for h in hosts if hosts[h].nics_used or hosts[h].nics_found), want)
    if not judged:
        return Finding("NCCL", "NICs per node", None, f"not judged: {NO_CHANNELS} over the network", None, want)
    counts = sorted({len(hosts[h].nics_used) for h in judged})
    silent = _silent(nodes, hosts, judged)
    if silent:  # as _net: the NICs of a node whose log shows no network channel were not counted; never passed
        return Finding("NCCL", "NICs per node", None, f"not judged: no network channel line naming a NIC read from "
                       f"the NCCL log of {_hosts(silent)} ({'/'.join(map(str, counts))} NIC(s) on {_hosts(judged)})",
                       None, want)
    return Finding("NCCL", "NICs per node", True, f"{'/'.join(map(str, counts))} NIC(s) carried the network channels "
                   f"on {_hosts(judged)}", counts[0], want)
