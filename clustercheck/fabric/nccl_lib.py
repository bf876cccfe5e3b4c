"""The NCCL library this process runs, by asking it (ncclGetVersion).

torch.cuda.nccl.version() is the NCCL torch was compiled against (torch/csrc/cuda/nccl.cpp builds it
from NCCL_MAJOR, NCCL_MINOR and NCCL_PATCH), not the one that runs. A libnccl.so.2 that is preloaded,
or one loaded before torch's, runs instead, and the run record, the versions check and the signed
statement would name the wrong library. On one H100, torch 2.11 (compiled with NCCL 2.28.9) ran a
preloaded NCCL 2.30.7: NCCL logged 2.30.7, torch said 2.28.9 (docs/validation/2026-11-27-h100-agents.md).

The library is found the way the dynamic linker binds torch's calls into it: first in the global scope
(dlsym(RTLD_DEFAULT): the program, LD_PRELOAD, libraries opened RTLD_GLOBAL), then the libnccl.so.2
that torch's own dependency resolved to (dlopen by soname with RTLD_NOLOAD: the first loaded object of
that soname, loading nothing new). A process with two copies mapped (a preload, and the copy torch
loads by path from its nvidia-nccl wheel) thus names the one that runs. On ROCm the library is RCCL
(librccl.so.1), whose ncclGetVersion gives the NCCL API version torch.cuda.nccl.version() gives there.
Where nothing answers (torch linked NCCL statically, no CUDA), the caller keeps torch's figure, which
then is the library that runs."""

from __future__ import annotations

import ctypes
import os

SONAMES = ("libnccl.so.2", "librccl.so.1")  # every NCCL 2.x; RCCL, which ROCm's torch loads, answers the same call


def decode(code: int) -> str:
    """ncclGetVersion's integer as X.Y.Z. nccl.h's NCCL_VERSION(X,Y,Z) is X*1000+Y*100+Z up to 2.8 and
    X*10000+Y*100+Z from 2.9 on, so 2804 is 2.8.4 and 23007 is 2.30.7."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _ask(lib: ctypes.CDLL) -> str | None:
    code = ctypes.c_int(0)
    if lib.ncclGetVersion(ctypes.byref(code)) != 0 or code.value <= 0:
        return None
    return decode(code.value)


def loaded_version() -> str | None:
    """The version of the NCCL this process's calls bind to; None where no NCCL is loaded."""
    try:  # the global scope, searched first when a library's calls are bound
        return _ask(ctypes.CDLL(None))
    except AttributeError:  # no NCCL there
        pass
    for soname in SONAMES:
        try:  # the copy a dependency on that soname resolved to; RTLD_NOLOAD: never a new one
            return _ask(ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY))
        except (OSError, AttributeError):
            continue
    return None


def version(torch_built: tuple[int, ...] | int | str) -> str:
    """The NCCL that runs: the loaded library's, else torch's build-time figure (a static NCCL)."""
    built = ".".join(map(str, torch_built)) if isinstance(torch_built, tuple) else str(torch_built)
    return loaded_version() or built
