"""What each `measure:` kind accepts in a suite's `params:`: validated with file, line and key, returned
as plain data the ranks receive (controller side; no torch here)."""

from __future__ import annotations

from typing import Any, Callable

from clustercheck import units
from clustercheck.errors import show
from clustercheck.formulas import PLACEMENTS
from clustercheck.schema import Fields, at_least, between, one_of

MAX_SIZE = 256 << 30  # bytes per buffer; far above any GPU's all_reduce sweep, far below a typo like 1TiB
DTYPES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
CANONICAL_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _sizes(f: Fields) -> list[int]:
    if "sizes" in f.data:
        raw = f.get("sizes", list)
        if not raw:
            raise f.error("sizes", "needs at least one size")
        sizes = [_parse_size(f, "sizes", s) for s in raw]
        if len(set(sizes)) != len(sizes):
            raise f.error("sizes", "lists a size twice")
        for other in ("min_bytes", "max_bytes", "step_factor"):
            if other in f.data:
                raise f.error(other, "give either sizes or min_bytes/max_bytes/step_factor, not both")
        return sorted(sizes)
    lo = _size(f, "min_bytes", "1MiB")
    hi = _size(f, "max_bytes", "16MiB")
    factor = f.get("step_factor", int, 2, check=at_least(2))
    if hi < lo:
        raise f.error("max_bytes", f"must be >= min_bytes ({lo}), got {hi}")
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    if len(sizes) > 64:
        raise f.error("max_bytes", f"the sweep has {len(sizes)} sizes; at most 64")
    return sizes


def _size(f: Fields, key: str, default: str) -> int:
    return _parse_size(f, key, f.get(key, (int, str), default))


def _parse_size(f: Fields, key: str, raw: object) -> int:
    """units.parse_size, quoting what the user wrote briefly whatever it is (a list nested through
    aliases, a 5,000-digit number), and refusing absurd sizes at once so that no message has to print
    them (the sweep and per-measure checks refuse the others above MAX_SIZE)."""
    problem = f"expected a size such as 16MiB, 1GiB or 4096, got {show(raw)}"
    if isinstance(raw, bool) or not isinstance(raw, (int, str)) or isinstance(raw, str) and len(raw) > 40:
        raise f.error(key, problem)
    if isinstance(raw, int) and raw <= 0:
        raise f.error(key, f"size must be positive, got {show(raw)}")
    try:
        size = units.parse_size(raw)
    except ValueError as exc:
        raise f.error(key, str(exc)) from None
    if size >= 1 << 100:
        raise f.error(key, f"size {show(raw)} is above the {units.format_size(MAX_SIZE)} limit")
    return size


def _collective_params(f: Fields) -> dict[str, Any]:
    sizes = _sizes(f)
    dtype = f.get("dtype", str, "float32", check=one_of(*DTYPES))
    dtype = CANONICAL_DTYPE.get(dtype, dtype)
    elt = DTYPES[dtype]
    size_key = "sizes" if "sizes" in f.data else "min_bytes"
    for s in sizes:
        if s % elt:
            raise f.error(size_key, f"size {s} B is not a whole number of {dtype} elements ({elt} B each)")
        if s > MAX_SIZE:
            raise f.error(size_key if s == sizes[0] else ("sizes" if size_key == "sizes" else "max_bytes"),
                          f"size {units.format_size(s)} is above the {units.format_size(MAX_SIZE)} limit")
    judge = _size(f, "judge_at", str(sizes[-1])) if "judge_at" in f.data else sizes[-1]
    if judge not in sizes:
        raise f.error("judge_at", f"{judge} B is not one of the swept sizes "
                                  f"({', '.join(units.format_size(s) for s in sizes)})")
    params = {
        "sizes": sizes,
        "dtype": dtype,
        "warmup": f.get("warmup", int, 5, check=between(0, 10_000)),
        "iters": f.get("iters", int, 20, check=between(1, 100_000)),
        "check_iters": f.get("check_iters", int, 1, check=between(0, 1_000)),
        "judge_at": judge,
        "per_iteration": f.get("per_iteration", bool, True),
        "cuda_graph": f.get("cuda_graph", int, 0, check=between(0, 10_000)),
    }
    if params["cuda_graph"] and not params["warmup"]:
        # NCCL >= 2.22 connects peers at a communicator's first use of an algorithm, with cudaMalloc: inside
        # a capture that fails (nccl-tests warms up first, common.cu BenchTime)
        raise f.error("warmup", "cuda_graph needs warmup >= 1: NCCL connects at first use, which a graph "
                                "capture cannot hold")
    return params


def collective_parser(collective: str) -> Callable[[Fields], dict[str, Any]]:
    available = PLACEMENTS[collective]

    def parse(f: Fields) -> dict[str, Any]:
        params = _collective_params(f)
        placements = f.get("placements", list, list(available))
        if not placements or any(p not in available for p in placements) or len(set(placements)) != len(placements):
            raise f.error("placements", f"{collective} can run {' and '.join(available)}-place "
                                        f"(as a list: {list(available)}), got {show(placements)}")
        params["placements"] = [p for p in available if p in placements]
        f.done()
        return params

    return parse


def copy_parser(size: str, loops: int, extra: Callable[[Fields, dict[str, Any]], None] | None = None
                 ) -> Callable[[Fields], dict[str, Any]]:
    def parse(f: Fields) -> dict[str, Any]:
        params = {"size": _size(f, "size", size), "loops": f.get("loops", int, loops, check=between(1, 10_000)),
                  "samples": f.get("samples", int, 3, check=between(1, 1_000))}
        if params["size"] % 4 or params["size"] > MAX_SIZE:
            raise f.error("size", f"must be a multiple of 4 bytes and at most {units.format_size(MAX_SIZE)}")
        if extra:
            extra(f, params)
        f.done()
        return params

    return parse


def p2p_extra(f: Fields, params: dict[str, Any]) -> None:
    params["bidirectional"] = f.get("bidirectional", bool, True)


def gemm_params(f: Fields) -> dict[str, Any]:
    params = {"m": f.get("m", int, 8192, check=between(16, 65_536)),
              "dtype": f.get("dtype", str, "auto", check=one_of("auto", *DTYPES)),
              "loops": f.get("loops", int, 20, check=between(1, 100_000)),
              "samples": f.get("samples", int, 3, check=between(1, 1_000))}
    params["dtype"] = CANONICAL_DTYPE.get(params["dtype"], params["dtype"])
    f.done()
    return params


def probe_params(f: Fields) -> dict[str, Any]:
    from clustercheck.expect import check_expect
    from clustercheck.probes import NAMES

    name = f.get("probe", str, check=one_of(*NAMES))
    expect = check_expect(f.get("expect", dict, {}), f.file, f.key_path("expect"), f.line_of("expect"))
    f.done()
    return {"probe": name, "expect": expect}
