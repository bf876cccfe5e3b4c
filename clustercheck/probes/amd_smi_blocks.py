"""amd-smi's "GPU: N" blocks (`list`, `static`, `metric`): indented keys under each GPU's number, read into
one flat key map per GPU. Captures of several commands are concatenated, so a GPU's blocks merge; a key
the input already gave that GPU coming back with another value is a contradiction, kept to be judged: the
second copy must never hide the first (an uncorrectable count of 5 overwritten by a stale copy's 0)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clustercheck.probes.base import ProbeParseError

_GPU_BLOCK = re.compile(r"^GPU: (\d+)\s*$")
_KEY = re.compile(r"^(\s+)([A-Z][A-Z0-9_ ]*?):\s*(.*?)\s*$")


@dataclass(frozen=True)
class Conflict:
    gpu: int
    key: str            # "ECC/TOTAL_UNCORRECTABLE_COUNT"
    first: tuple[int, str]   # (line, value) as first read
    again: tuple[int, str]   # (line, value) of the later block that says otherwise

    def detail(self) -> str:
        return (f"{self.key} reads {self.first[1]!r} at line {self.first[0]} and {self.again[1]!r} at line "
                f"{self.again[0]}: the input contradicts itself")


def blocks(lines: list[str], numbers: list[int]) -> tuple[dict[int, dict[str, str]], tuple[Conflict, ...]]:
    """"GPU: N" blocks as {N: {"ECC_BLOCKS/UMC/UNCORRECTABLE_COUNT": "0", ...}}, merged across commands, and
    every key read twice for one GPU with two values. `numbers` are the input's line numbers of `lines`."""
    out: dict[int, dict[str, str]] = {}
    where: dict[tuple[int, str], int] = {}  # (GPU, key) -> the line it was first read at
    conflicts: list[Conflict] = []
    gpu: int | None = None
    stack: list[tuple[int, str]] = []
    ended: tuple[int, str] | None = None   # the margin line that ended a block, until the next block starts
    for number, line in zip(numbers, lines):
        m = _GPU_BLOCK.match(line)
        if m:
            gpu, stack, ended = int(m.group(1)), [], None
            out.setdefault(gpu, {})
            continue
        k = _KEY.match(line)
        if k and gpu is None and ended is not None:
            # amd-smi indents every key of a block under its "GPU: N": one after a foreign line at the margin
            # is a block that line cut in two, whose keys would be lost without a word
            raise ProbeParseError(f"line {number}: {line.strip()[:60]!r} is indented under {ended[1]!r} (line "
                                  f"{ended[0]}), which cut a GPU block: not amd-smi output")
        if gpu is None or not k:
            if line and not line[0].isspace():
                ended = (number, line.strip()[:60]) if gpu is not None or ended is not None else None
                gpu = None  # a prompt, a table title: the block has ended
            continue
        indent = len(k.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not k.group(3):
            stack.append((indent, k.group(2)))
            continue
        key, value, keys = "/".join([s for _, s in stack] + [k.group(2)]), k.group(3), out[gpu]
        if key in keys and keys[key] != value:
            conflicts.append(Conflict(gpu, key, (where[(gpu, key)], keys[key]), (number, value)))
            continue  # the first value stays: the verdict on the contradiction fails the GPU either way
        keys.setdefault(key, value)
        where.setdefault((gpu, key), number)
    return out, tuple(conflicts)
