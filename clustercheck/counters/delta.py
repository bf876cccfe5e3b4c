"""What rose between two snapshots of one node: counter increases per counter and device (with the
source's breakdown), one increase per kind of hardware line the kernel logged in the window, and the
errors that keep the window from being judged whole (a reader that failed in either snapshot, a counter
that vanished, went down or sits saturated)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from clustercheck.counters.facts import Counter, KernelLine, ReadError, Snapshot
from clustercheck.counters.pci import BUS_ID


@dataclass(frozen=True)
class Increase:
    name: str                                # pcie.aer.correctable, kernel.xid.79
    device: str
    before: int
    after: int
    parts: tuple[tuple[str, int], ...] = ()  # what rose inside it: (Receiver Error, 3)
    lines: tuple[str, ...] = ()              # kernel lines behind a kernel.* increase

    @property
    def amount(self) -> int:
        return self.after - self.before

    def text(self) -> str:
        parts = ", ".join(f"{p} +{n}" for p, n in self.parts)
        where = f" on {self.device}" if self.device else ""
        return f"{self.name}{where} rose by {self.amount} ({self.before} -> {self.after}" + \
            (f"; {parts}" if parts else "") + ")"


@dataclass(frozen=True)
class Delta:
    host: str
    seconds: float
    increases: tuple[Increase, ...]
    errors: tuple[ReadError, ...]
    notes: tuple[str, ...] = ()  # what the node has not got to read (no ECC, no IB), from either snapshot


def delta(before: Snapshot, after: Snapshot) -> Delta:
    """Increases from `before` to `after` (taken on the same node, `after` reading the kernel log from
    `before`'s cursor)."""
    if before.host != after.host:
        raise ValueError(f"snapshots of different nodes: {before.host} and {after.host}")
    increases: list[Increase] = []
    # A reader that failed before the window leaves the window's start unread; but kernel log lines lost by
    # the read that took `before` were lost from the window before it, which reported them: carried on, they
    # kept every later check from being judged
    carried = [e for e in before.errors if not (e.reader == "kernel.log" and e.kind == "lost")]
    errors = carried + [e for e in after.errors if e not in carried]
    now = {_key(c): c for c in after.counters}
    # a GPU no longer enumerated is one `vanished` for the GPU, not one per counter and link it had
    gone = [ReadError("gpu", c.device, c.name, _GONE[c.name], "vanished") for c in before.counters
            if c.name == "gpu.present" and _key(c) not in now]
    for old in before.counters:
        new = now.get(_key(old))
        if new is None:
            if not any(e.explains(old.name, old.device) for e in after.errors + tuple(gone)):  # a reader error
                errors.append(ReadError(old.name.split(".")[0], old.device, old.name,  # says why, or:
                                        f"read {old.value} before the window and missing after it", "vanished"))
            continue
        if new.value < old.value:
            errors.append(ReadError(old.name.split(".")[0], old.device, old.name,
                                    f"went down from {old.value} to {new.value}: reset during the window, "
                                    "so its increase cannot be known", "reset"))
        elif new.value > old.value:
            was = dict(old.parts)
            parts = tuple((p, v - was.get(p, 0)) for p, v in new.parts if v > was.get(p, 0))
            increases.append(Increase(old.name, old.device, old.value, new.value, parts))
    known = {_key(c) for c in before.counters}
    for new in after.counters:
        if _key(new) not in known and not any(e.explains(new.name, new.device) for e in before.errors):
            errors.append(ReadError(new.name.split(".")[0], new.device, new.name, _CAME.get(
                new.name, f"appeared during the window at {new.value} (not read before it)"), "vanished"))
    errors = _once([_named(e, before, after) for e in errors],
                   [e for e in gone if not any(a.explains(e.what, e.device) for a in after.errors)])
    increases += _kernel(after.kernel)
    return Delta(after.host, after.taken - before.taken, tuple(increases), tuple(errors),
                 tuple(dict.fromkeys(before.notes + after.notes)))


# A GPU's counters are named `GPU<index> (<bus id>)...`; NVML renumbers the GPUs after one that is gone, so a
# counter is the same counter before and after by its bus id, not its index
_GPU = re.compile(rf"^GPU\d+ \(({BUS_ID})\)")
_GONE = {"gpu.present": "enumerated by NVML before the window and not after it: the GPU fell off the bus or "
                        "was detached"}
_CAME = {"gpu.present": "enumerated by NVML after the window and not before it"}


def _key(c: Counter) -> tuple[str, str]:
    m = _GPU.match(c.device)
    return (c.name, f"{m.group(1).lower()}{c.device[m.end():]}") if m else c.key


def _named(e: ReadError, before: Snapshot, after: Snapshot) -> ReadError:
    """A GPU lost before NVML gave its PCI info is `GPU2` alone; the snapshot before the window read its
    counters as `GPU2 (0000:...)`: the error names it so, by bus id. Unless that bus id still gives counters
    after the window: NVML renumbered the GPUs after another one gone, so index 2 is another GPU now (with
    two GPUs lost, naming it by the old index blamed a GPU alive after the window)."""
    if e.kind != "vanished" or not re.fullmatch(r"GPU\d+", e.device):
        return e
    named = {(m.group(0), m.group(1).lower()) for c in before.counters
             if (m := _GPU.match(c.device)) and e.explains(c.name, c.device)}
    if len(named) != 1:
        return e
    ((name, bus),) = named
    alive = {m.group(1).lower() for c in after.counters if (m := _GPU.match(c.device))}
    return dataclasses.replace(e, device=f"{e.device} (index after renumbering)" if bus in alive else name)


_AT_INDEX = re.compile(r"GPU\d+(?: \(index after renumbering\))?")


def _once(errors: list[ReadError], gone: list[ReadError]) -> list[ReadError]:
    """`errors` and the GPUs `gone` (read before the window, not enumerated after it), each lost GPU named
    once. A GPU NVML still lists after the window but lost before it gave its PCI info is `GPU<i>` alone,
    which _named could not give a bus id (NVML renumbered the GPUs after another one gone): it is one of
    `gone`, whose bus ids are the ones no GPU answers for after the window. Named by its index beside them,
    one loss was two failures (two GPUs lost, three named). By elimination: one such GPU and one gone is
    that GPU; more, and each gone one is named once, saying that some of them are NVML's lost indices."""
    lost = [e for e in errors if e.kind == "vanished" and _AT_INDEX.fullmatch(e.device)]
    indices = list(dict.fromkeys(e.device.split(" ")[0] for e in lost))
    if not lost or len(gone) < len(indices):  # a GPU not read before the window: nothing to name it by
        return errors + gone
    rest = [e for e in errors if e not in lost]
    if len(gone) == len(indices) == 1:
        return rest + [dataclasses.replace(e, device=gone[0].device) for e in lost]
    said = "; ".join(dict.fromkeys(f"{e.what}: {e.error}" for e in lost))
    return rest + [dataclasses.replace(g, error=f"{g.error}; or it is one of the {len(indices)} of these "
                                       f"{len(gone)} NVML lists, renumbered, as {', '.join(indices)} ({said})")
                   for g in gone]


def _kernel(lines: tuple[KernelLine, ...]) -> list[Increase]:
    """One increase per counter and device: the events its lines report (one a line, an amdgpu RAS line its
    new errors)."""
    grouped: dict[tuple[str, str], list[KernelLine]] = {}
    for line in lines:
        if line.kind:
            grouped.setdefault((line.counter, line.device), []).append(line)
    return [Increase(name, device, 0, sum(l.count for l in got), (), tuple(l.text for l in got))
            for (name, device), got in grouped.items()]
