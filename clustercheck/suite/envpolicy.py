"""Which environment variables a suite's `env:` may set for the rank processes.

A suite is shared and reviewed as data, so nothing in it may choose a file, library or program that
a rank (or the launcher the controller starts: srun, ssh) would load or run. The policy is an
allow-list of prefixes of the collective libraries the ranks use, and a deny-list that wins over it.
The operator's own environment is not limited: the ranks inherit it, and that is where paths belong.
docs/security.md has the table and the tests that prove each row.
"""

from __future__ import annotations

import re

from clustercheck.errors import escape

MAX_VALUE = 4096  # characters; NCCL's longest list values (NCCL_IB_HCA, ...) are far below this

# Prefixes of the libraries a collective check runs through.
ALLOWED_PREFIXES: tuple[str, ...] = (
    "NCCL_",               # NCCL (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)
    "RCCL_",               # RCCL, NCCL's ROCm port
    "NVSHMEM_",            # NCCL's device API and symmetric memory are built on NVSHMEM
    "TORCH_NCCL_",         # torch.distributed's NCCL process group (async error handling, timeouts)
    "TORCH_GLOO_",         # torch.distributed's gloo process group
    "TORCH_DISTRIBUTED_",  # TORCH_DISTRIBUTED_DEBUG
    "GLOO_",               # gloo (GLOO_SOCKET_IFNAME)
    "CUDA_",               # CUDA_VISIBLE_DEVICES, CUDA_DEVICE_MAX_CONNECTIONS, ...
    "HIP_", "HSA_",        # the ROCm runtime, as CUDA_ for RCCL
    "UCX_",                # UCX, under NCCL's UCX net plugin and UCC
    "FI_",                 # libfabric, under the aws-ofi-nccl net plugin (FI_PROVIDER, FI_EFA_*)
    "MLX5_",               # the rdma-core mlx5 provider under NCCL's IB transport
    "OMP_",                # OMP_NUM_THREADS: the ranks' intra-op threads
)
ALLOWED_NAMES: frozenset[str] = frozenset({"TORCH_CPP_LOG_LEVEL", "TORCH_SHOW_CPP_STACKTRACES"})

# Refused whatever the allow-list says, with the reason the author is shown.
_LOADER = "makes the dynamic loader load a library of the author's choosing"
DENIED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", _LOADER),                                                   # LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT
    ("PYTHON", "makes Python run or import code of the author's choosing"),  # PYTHONPATH, PYTHONSTARTUP, PYTHONHOME
    ("SLURM_", "is read by srun, which runs prolog programs it names (SLURM_TASK_PROLOG)"),
    ("SRUN_", "is read by srun as its options"),
    ("SSH_", "is read by ssh (SSH_ASKPASS names a program it runs)"),
    ("OMPI_", "is read by Open MPI, whose MCA parameters name programs and components to load"),
    ("CC_", "is clustercheck's own control of the ranks"),
)
DENIED_NAMES: dict[str, str] = {
    "PATH": "chooses which programs run",
    "BASH_ENV": "names a script every bash runs",
    "ENV": "names a script every sh runs",
    "IFS": "changes how shells split words",
    "GCONV_PATH": _LOADER,
    "NCCL_COMM_ID": "points every rank's NCCL bootstrap at an address of the author's choosing",
}
# Words in a name that make its value a file, directory, library, program or destination, e.g.
# NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN (dlopen a library by name or path), NCCL_CONF_FILE (more
# variables from a file), NCCL_DEBUG_FILE / NCCL_TOPO_DUMP_FILE (write a file), CUDA_INJECTION64_PATH
# (a library loaded at cuInit), FI_PROVIDER_PATH and UCX_MODULE_DIR (directories of libraries),
# OMP_TOOL_LIBRARIES and HSA_TOOLS_LIB (tool libraries loaded by the runtime), UCX_STATS_DEST.
DENIED_WORDS: frozenset[str] = frozenset({
    "PRELOAD", "PLUGIN", "PLUGINS", "LIB", "LIBS", "LIBRARY", "LIBRARIES", "TOOL", "TOOLS",
    "PATH", "PATHS", "FILE", "FILES", "DIR", "DIRS", "DIRECTORY", "HOME", "CONF", "CONFIG",
    "COMMAND", "CMD", "EXEC", "SCRIPT", "PIPE", "DEST", "OUT",
})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def name_problem(name: str) -> str | None:
    """Why a suite may not set `name`, or None when it may."""
    if not _NAME.fullmatch(name):  # match() would let 'NAME\n' through ($ before a final newline)
        return "is not a valid environment variable name"
    upper = name.upper()
    if upper in DENIED_NAMES:
        return f"{DENIED_NAMES[upper]}: a suite may not set it"
    for prefix, why in DENIED_PREFIXES:
        if upper.startswith(prefix):
            return f"{why}: a suite may not set {prefix}* variables"
    if upper.endswith("_PRELOAD"):
        return f"{_LOADER}: a suite may not set it"
    words = sorted(DENIED_WORDS.intersection(upper.split("_")))
    if words:
        return (f"names a file, library or program ({words[0]}), which a suite may not choose; "
                f"set it in the environment clustercheck runs in")
    if name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES):
        return None
    return (f"is not a variable a suite may set; allowed: {', '.join(p + '*' for p in ALLOWED_PREFIXES)}, "
            f"{', '.join(sorted(ALLOWED_NAMES))} (see docs/security.md)")


def value_problem(value: str) -> str | None:
    """Why `value` cannot be a rank's environment value, or None."""
    if len(value) > MAX_VALUE:
        return f"a value of {len(value)} characters; at most {MAX_VALUE}"
    if escape(value) != value:  # NUL cannot be passed at all; the rest would corrupt logs and verdicts
        return "a value with a control character (NUL, newline, tab, ESC, ...)"
    return None
