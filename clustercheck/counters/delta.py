"""What rose between two snapshots of one node: counter increases per counter and device (with the
source's breakdown), one increase per kind of hardware line the kernel logged in the window, and the
errors that keep the window from being judged whole (a reader that failed in either snapshot, a counter
that vanished, went down or sits saturated)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from clustercheck.counters.facts import Counter, KernelLine, ReadError, Snapshot
from clustercheck.counters.nvml_counters import PRESENT
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
    # NVML's errors naming a GPU by its index alone (lost, or unreadable, before it gave its PCI info) say
    # nothing of a bus id: after a GPU is gone NVML renumbers the rest, so `GPU2` may be another GPU than
    # before the window. _gpus ties them to bus ids; every other error explains by bus id (_explains)
    at_index = [e for e in after.errors if e.reader == "nvml" and _INDEX.fullmatch(e.device) and e not in carried]
    by_bus = [e for e in after.errors if e not in at_index]
    # a GPU no longer enumerated is one `vanished` for the GPU, not one per counter and link it had
    gone = [c for c in before.counters if c.name == PRESENT and _key(c) not in now and _GPU.match(c.device)
            and not any(_explains(e, c.name, c.device) for e in by_bus)]
    said, replaced = _gpus(before, after, gone, at_index)
    accounted = {_key(c)[1] for c in gone}
    for old in before.counters:
        new = now.get(_key(old))
        if new is None:
            if _key(old)[1].split(" ")[0] in accounted or any(_explains(e, old.name, old.device) for e in by_bus) \
                    or (not _GPU.match(old.device) and any(e.explains(old.name, old.device) for e in at_index)):
                continue  # a reader error says why, or:
            errors.append(ReadError(old.name.split(".")[0], old.device, old.name,
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
    # a GPU enumerated after the window and not before it is one error for the GPU, as one gone is, not one
    # per counter and link it has
    came = {_key(c)[1] for c in after.counters if c.name == PRESENT and _key(c) not in known and _GPU.match(c.device)}
    for new in after.counters:
        if _key(new) not in known and not any(e.explains(new.name, new.device) for e in before.errors) \
                and (new.name == PRESENT or _key(new)[1].split(" ")[0] not in came):
            errors.append(ReadError(new.name.split(".")[0], new.device, new.name, APPEARED + _CAME.get(
                new.name, f" at {new.value} (not read before it)"), "vanished"))
    errors = [e for e in errors if e not in replaced] + said
    increases += _kernel(after.kernel)
    return Delta(after.host, after.taken - before.taken, tuple(increases), tuple(errors),
                 tuple(dict.fromkeys(before.notes + after.notes)))


# A GPU's counters are named `GPU<index> (<bus id>)...`; NVML renumbers the GPUs after one that is gone, so a
# counter is the same counter before and after by its bus id, not its index
_GPU = re.compile(rf"^GPU(\d+) \(({BUS_ID})\)")
_INDEX = re.compile(r"GPU\d+")
_GONE = "enumerated by NVML before the window and not after it: the GPU fell off the bus or was detached"
_CAME = {PRESENT: ": enumerated by NVML after the window and not before it"}
APPEARED = "appeared during the window"  # how a `vanished` error of a counter new after the window begins


def appeared(e: ReadError) -> bool:
    """Whether `e` is a counter or GPU that appeared during the window (not read before it): the hardware
    changed under the check as for one gone, but it is not gone."""
    return e.kind == "vanished" and e.error.startswith(APPEARED)


def _key(c: Counter) -> tuple[str, str]:
    return c.name, _by_bus(c.device)


def _by_bus(device: str) -> str:
    """`GPU2 (0000:3a:00.0) link 3` as `GPU@0000:3a:00.0 link 3`: the same GPU whichever index NVML gives it
    (not the bare bus id, which is its PCI function's, pcie.aer's device)."""
    m = _GPU.match(device)
    return f"GPU@{m.group(2).lower()}{device[m.end():]}" if m else device


def _explains(e: ReadError, counter: str, device: str) -> bool:
    """e.explains, a GPU matched by bus id: an error on `GPU2 (0000:5d:00.0)` after the window accounts for
    the counters the snapshot before it read as `GPU3 (0000:5d:00.0)`."""
    return dataclasses.replace(e, device=_by_bus(e.device)).explains(counter, _by_bus(device))


def _gpus(before: Snapshot, after: Snapshot, gone: list[Counter], at_index: list[ReadError]
          ) -> tuple[list[ReadError], list[ReadError]]:
    """(one `vanished` error per GPU `gone`, the errors of `at_index` they replace). A GPU NVML names by index
    alone after the window (`GPU2`: lost, or unreadable, before it gave its PCI info) is one of `gone`,
    tied to it by the order NVML lists the GPUs in, which renumbering keeps: between the GPUs listed by
    bus id around it (GPU1 is 0000:2a, GPU3 0000:9a), it is one gone from between them. As many GPUs named
    by index as gone there: each is the one in its place (a lost one is named by that bus id; an unreadable
    one accounts for it, the window not judged for it). Fewer: the others are gone; if an unreadable one
    is among them, which GPUs are gone cannot be told and they are named together (`GPU2 (...) or GPU3
    (...)`), never one guessed (a live GPU failed, the gone one never named). More: not all of them were
    read before the window; the lost ones are named `GPU<i> (bus id unknown)`."""
    def bus(device: str) -> str:
        return _by_bus(device).split(" ")[0]
    order = [bus(c.device) for c in sorted((c for c in before.counters if c.name == PRESENT and _GPU.match(c.device)),
                                           key=lambda c: _index(c.device))]
    pos = {b: p for p, b in enumerate(order)}
    marks = sorted((_index(c.device), pos[bus(c.device)]) for c in after.counters
                   if c.name == PRESENT and bus(c.device) in pos)
    ordered = all(a[1] < b[1] for a, b in zip(marks, marks[1:]))  # else NVML reordered: one gap of all

    def around(at: int, key: int) -> tuple[int, int]:  # the listed GPUs either side: (index, pos)[key] vs at
        if not ordered:
            return -1, len(order)
        return (max((m[1] for m in marks if m[key] < at), default=-1),
                min((m[1] for m in marks if m[key] > at), default=len(order)))
    named: dict[int, list[ReadError]] = {}
    for e in at_index:
        named.setdefault(_index(e.device), []).append(e)
    gaps: dict[tuple[int, int], tuple[list[int], list[Counter]]] = {}
    for i in sorted(named):
        gaps.setdefault(around(i, 0), ([], []))[0].append(i)
    for c in sorted(gone, key=lambda c: pos[bus(c.device)]):
        gaps.setdefault(around(pos[bus(c.device)], 1), ([], []))[1].append(c)
    out: list[ReadError] = []
    replaced: list[ReadError] = []
    for indices, cands in gaps.values():
        lost = {i: [e for e in named[i] if e.kind == "vanished"] for i in indices}
        lost = {i: es for i, es in lost.items() if es}
        unread = [i for i in indices if i not in lost]
        replaced += [e for es in lost.values() for e in es]
        said = "; ".join(dict.fromkeys(f"GPU{i}: {e.what}: {e.error}" for i in indices for e in named[i]))
        if len(indices) == len(cands):
            for i, c in zip(indices, cands):
                moved = f" (NVML lists it as GPU{i} after the window)" if _index(c.device) != i else ""
                out += [dataclasses.replace(e, device=c.device, error=e.error + moved) for e in lost.get(i, ())]
        elif len(indices) < len(cands) and unread:
            n = len(cands) - len(unread)
            out.append(ReadError("gpu", " or ".join(c.device for c in cands), PRESENT,
                                 f"{n} of these {len(cands)} GPUs {'was' if n == 1 else 'were'} {_GONE}; which "
                                 f"cannot be told: NVML lists {len(indices)} GPU(s) between them by index alone "
                                 f"({said})", "vanished"))
        else:
            more = f"; or it is one of the GPUs NVML lists by index alone, renumbered ({said})" if indices else ""
            out += [ReadError("gpu", c.device, PRESENT, _GONE + more, "vanished") for c in cands]
            if len(indices) > len(cands):
                out += [dataclasses.replace(e, device=f"GPU{i} (bus id unknown)") for i, es in lost.items()
                        for e in es]
    return out, replaced


def _index(device: str) -> int:
    """2 for `GPU2` and `GPU2 (0000:3a:00.0)` (a GPU's gpu.present, or an NVML error naming it)."""
    return int(device[3:].split(" ")[0])


def _kernel(lines: tuple[KernelLine, ...]) -> list[Increase]:
    """One increase per counter and device: the events its lines report (one a line, an amdgpu RAS line its
    new errors)."""
    grouped: dict[tuple[str, str], list[KernelLine]] = {}
    for line in lines:
        if line.kind:
            grouped.setdefault((line.counter, line.device), []).append(line)
    return [Increase(name, device, 0, sum(l.count for l in got), (), tuple(l.text for l in got))
            for (name, device), got in grouped.items()]
