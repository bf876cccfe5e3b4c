"""Parameter parsing several measure kinds share: sizes and sweeps of sizes (validated with file, line and
key, refusing absurd values before any message has to print them) and the copy kinds' size/loops/samples.
Each kind's own parameters are parsed in its module. Controller side; no torch here."""

from __future__ import annotations

from typing import Any, Callable

from clustercheck import units
from clustercheck.errors import show
from clustercheck.schema import Fields, at_least, between

MAX_SIZE = units.MAX_SIZE  # bytes per buffer or file; units.parse_size refuses more
MAX_SWEEP = 64  # sizes in one sweep, listed or generated: each is a whole measurement (warmup, iters, checks)


def sizes(f: Fields) -> list[int]:
    if "sizes" in f.data:
        raw = f.get("sizes", list)
        if not raw:
            raise f.error("sizes", "needs at least one size")
        if len(raw) > MAX_SWEEP:  # counted before parsing: 80 or 80,000 listed sizes were all measured
            raise f.error("sizes", f"lists {len(raw)} sizes; at most {MAX_SWEEP}")
        found = [parse_size(f, "sizes", s) for s in raw]
        if len(set(found)) != len(found):
            raise f.error("sizes", "lists a size twice")
        for other in ("min_bytes", "max_bytes", "step_factor"):
            if other in f.data:
                raise f.error(other, "give either sizes or min_bytes/max_bytes/step_factor, not both")
        return sorted(found)
    lo = size(f, "min_bytes", "1MiB")
    hi = size(f, "max_bytes", "16MiB")
    factor = f.get("step_factor", int, 2, check=at_least(2))
    if hi < lo:
        raise f.error("max_bytes", f"must be >= min_bytes ({lo}), got {hi}")
    found = []
    step = lo
    while step <= hi:
        found.append(step)
        step *= factor
    if len(found) > MAX_SWEEP:
        raise f.error("max_bytes", f"the sweep has {len(found)} sizes; at most {MAX_SWEEP}")
    return found


def size(f: Fields, key: str, default: str) -> int:
    return parse_size(f, key, f.get(key, (int, str), default))


def parse_size(f: Fields, key: str, raw: object) -> int:
    """units.parse_size, quoting what the user wrote briefly whatever it is (a list nested through
    aliases, a 5,000-digit number), and refusing sizes above MAX_SIZE for every kind (gdsio's file,
    ib_write_bw's message: 1000000000GiB was accepted)."""
    problem = f"expected a size such as 16MiB, 1GiB or 4096, got {show(raw)}"
    if isinstance(raw, bool) or not isinstance(raw, (int, str)) or isinstance(raw, str) and len(raw) > 40:
        raise f.error(key, problem)
    if isinstance(raw, int) and raw <= 0:
        raise f.error(key, f"size must be positive, got {show(raw)}")
    try:
        return units.parse_size(raw)
    except ValueError as exc:
        raise f.error(key, str(exc)) from None


def copy_parser(default_size: str, loops: int, extra: Callable[[Fields, dict[str, Any]], None] | None = None
                 ) -> Callable[[Fields], dict[str, Any]]:
    def parse(f: Fields) -> dict[str, Any]:
        params = {"size": size(f, "size", default_size), "loops": f.get("loops", int, loops, check=between(1, 10_000)),
                  "samples": f.get("samples", int, 3, check=between(1, 1_000))}
        if params["size"] % 4 or params["size"] > MAX_SIZE:
            raise f.error("size", f"must be a multiple of 4 bytes and at most {units.format_size(MAX_SIZE)}")
        if extra:
            extra(f, params)
        f.done()
        return params

    return parse
