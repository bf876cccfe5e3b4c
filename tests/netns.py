"""Hosts as Linux network namespaces on one machine: a test bed for multi-node code without nodes.

    with netbed(4) as bed:            # bed.hosts: namespace names, one "host" each
        bed.throttle_host(bed.hosts[2], "20mbit")       # that host's only link is slow
        bed.throttle_pair(bed.hosts[0], bed.hosts[1], "20mbit")  # only traffic between these two

Layout. A switch namespace holds a bridge; each host namespace holds `eth0`, one end of a veth pair
whose other end is a port of that bridge; the root namespace gets one more veth into the bridge, so
that a controller running here (the c10d store) is reachable from every host at `bed.root_addr`.
Addresses come from one /24 of 10.0.0.0/8 that no route of the root namespace touches. Every name
carries this process's id and a counter, so concurrent tests never collide, and `destroy()` (run by
`netbed()` whatever happens in the block, and by `create()` when building fails half way) deletes
the namespaces, which takes their veths and the bridge with them.

`tc qdisc ... tbf` and `htb` work on veths in this kernel; `netem` does not exist here (unknown qdisc),
so a link is made slow, never lossy or delayed. No shell is ever involved: every command is an argv.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

IFNAME = "eth0"  # every host's interface has this name inside its own namespace (GLOO_SOCKET_IFNAME)
_COUNTER = itertools.count()


def unavailable() -> str | None:
    """Why no test bed can be built here (a skip reason), or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2's ip and tc are not installed"
    probe = f"ccprobe{os.getpid():x}"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip() or made.returncode}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class NetBed:
    tag: str
    hosts: tuple[str, ...]
    addr: dict[str, str]  # host namespace -> its eth0 address
    root_addr: str  # the root namespace's address on the bridge (where the ranks reach the controller)
    switch: str  # the namespace holding the bridge
    root_if: str  # the root namespace's veth into the bridge
    port: dict[str, str] = field(default_factory=dict)  # host -> its bridge port (inside `switch`)

    @staticmethod
    def create(n: int) -> NetBed:
        tag = f"cc{os.getpid():x}x{next(_COUNTER):x}"
        net = _free_subnet()
        hosts = tuple(f"{tag}-h{i}" for i in range(1, n + 1))
        ips = [str(ip) for ip in itertools.islice(net.hosts(), n)]
        bed = NetBed(tag, hosts, dict(zip(hosts, ips)), str(net.network_address + 254), f"{tag}-sw", f"{tag}-r")
        try:
            bed._build(net.prefixlen)
        except BaseException:
            bed.destroy()
            raise
        return bed

    def _build(self, prefix: int) -> None:
        sw = self.switch
        _run(["ip", "netns", "add", sw])
        _ns(sw, "ip", "link", "add", "br0", "type", "bridge")
        _ns(sw, "ip", "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts, 1):
            outer, inner = f"{self.tag}-p{i}", f"{self.tag}-e{i}"  # names unique in the root namespace
            _run(["ip", "netns", "add", host])
            _run(["ip", "link", "add", outer, "type", "veth", "peer", "name", inner])
            _run(["ip", "link", "set", outer, "netns", sw])
            _run(["ip", "link", "set", inner, "netns", host])
            _ns(host, "ip", "link", "set", inner, "name", IFNAME)
            _ns(host, "ip", "addr", "add", f"{self.addr[host]}/{prefix}", "dev", IFNAME)
            _ns(host, "ip", "link", "set", IFNAME, "up")
            _ns(host, "ip", "link", "set", "lo", "up")
            _ns(sw, "ip", "link", "set", outer, "master", "br0")
            _ns(sw, "ip", "link", "set", outer, "up")
            self.port[host] = outer
        peer = f"{self.tag}-q"
        _run(["ip", "link", "add", self.root_if, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", sw])
        _ns(sw, "ip", "link", "set", peer, "master", "br0")
        _ns(sw, "ip", "link", "set", peer, "up")
        _run(["ip", "addr", "add", f"{self.root_addr}/{prefix}", "dev", self.root_if])
        _run(["ip", "link", "set", self.root_if, "up"])

    # -- slow links --------------------------------------------------------------------------------
    def throttle_host(self, host: str, rate: str) -> None:
        """Make `host`'s only link slow both ways (tbf on its eth0 and on its bridge port): every peer
        it talks to, and the controller, see it at `rate`."""
        for ns, dev in ((host, IFNAME), (self.switch, self.port[host])):
            _ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kbit",
                "latency", "50ms")

    def throttle_pair(self, a: str, b: str, rate: str) -> None:
        """Make only the traffic between `a` and `b` slow, both ways: on each one's eth0 an htb whose
        default class is unlimited and whose slow class takes the packets bound for the other."""
        for src, dst in ((a, b), (b, a)):
            dev = ("dev", IFNAME)
            _ns(src, "tc", "qdisc", "replace", *dev, "root", "handle", "1:", "htb", "default", "10")
            _ns(src, "tc", "class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit")
            _ns(src, "tc", "class", "add", *dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate, "ceil", rate)
            _ns(src, "tc", "filter", "add", *dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match",
                "ip", "dst", f"{self.addr[dst]}/32", "flowid", "1:20")

    def cut(self, host: str) -> None:
        """Take `host`'s bridge port down: from now on it reaches neither its peers nor the controller
        (the processes inside it live on, as on a node whose cable was pulled)."""
        _ns(self.switch, "ip", "link", "set", self.port[host], "down")

    def unthrottle(self) -> None:
        for host in self.hosts:
            _ns(host, "tc", "qdisc", "del", "dev", IFNAME, "root", check=False)
            _ns(self.switch, "tc", "qdisc", "del", "dev", self.port[host], "root", check=False)

    # -- teardown ----------------------------------------------------------------------------------
    def pids(self) -> list[int]:
        """Processes still running in this bed's namespaces (ranks the test started)."""
        out: list[int] = []
        for ns in (*self.hosts, self.switch):
            listed = _run(["ip", "netns", "pids", ns], check=False)
            out += [int(p) for p in listed.stdout.split() if p.isdigit()]
        return out

    def destroy(self) -> None:
        """Delete everything this bed made; safe to call twice and after a half-built bed."""
        for pid in self.pids():  # only processes inside our own namespaces: ranks this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _run(["ip", "link", "del", self.root_if], check=False)
        for ns in (*self.hosts, self.switch):
            _run(["ip", "netns", "del", ns], check=False)
        # veths whose namespace move failed half way stay in the root namespace under our names
        for i in range(1, len(self.hosts) + 1):
            for name in (f"{self.tag}-p{i}", f"{self.tag}-e{i}"):
                if os.path.exists(f"/sys/class/net/{name}"):
                    _run(["ip", "link", "del", name], check=False)

    def leftovers(self) -> list[str]:
        """What of this bed still exists (empty after destroy)."""
        listed = set(_run(["ip", "netns", "list"], check=False).stdout.split())
        names = [ns for ns in (*self.hosts, self.switch) if ns in listed]
        return names + [n for n in os.listdir("/sys/class/net") if n.startswith(f"{self.tag}-")]


@contextmanager
def netbed(n: int) -> Iterator[NetBed]:
    bed = NetBed.create(n)
    try:
        yield bed
    finally:
        bed.destroy()


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.0.0.0/8 that no address or route of the root namespace overlaps, chosen from this
    process's id so that concurrent test beds pick different ones."""
    used = []
    for line in _run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout.splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("local", "broadcast"):
            word = line.split()[1]
        try:
            used.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue  # "default" and the like
    start = (os.getpid() * 7 + next(_COUNTER)) % 250
    for k in range(250):
        net = ipaddress.ip_network(f"10.{200 + (start + k) // 50 % 50}.{(start + k) % 250}.0/24")
        if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return net
    raise RuntimeError("no free /24 in 10.0.0.0/8 for a test bed")


def _ns(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["ip", "netns", "exec", ns, *argv], check=check)


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def wait_gone(bed: NetBed, seconds: float = 5.0) -> list[str]:
    """Leftovers after destroy, allowing the kernel a moment to tear veths down."""
    end = time.monotonic() + seconds
    while (left := bed.leftovers()) and time.monotonic() < end:
        time.sleep(0.05)
    return left
