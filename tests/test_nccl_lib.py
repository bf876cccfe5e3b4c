"""The NCCL version a rank records is the library its calls bind to (clustercheck/fabric/nccl_lib.py),
not the one torch was compiled against. This machine has no NCCL, so stand-in libnccl.so.2 libraries
are built with gcc, together with a library that depends on libnccl.so.2 and calls it, as torch's
libtorch_cuda.so does. They are loaded the ways a rank loads NCCL (torch opening its wheel's copy by
path, LD_PRELOAD, a dependency), and the version read must be the one that library's call returns.
The real NCCL path ran on an H100 (docs/validation/2026-11-27-h100-agents.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from clustercheck.fabric.nccl_lib import decode, loaded_version, version


@pytest.mark.parametrize(("code", "text"), [(23007, "2.30.7"), (22103, "2.21.3"), (2804, "2.8.4"), (2708, "2.7.8")])
def test_nccl_version_codes_decode_on_both_sides_of_2_9(code: int, text: str) -> None:
    assert decode(code) == text


def test_no_nccl_loaded_keeps_torchs_figure() -> None:
    assert loaded_version() is None  # this test process loads no NCCL
    assert version((2, 28, 9)) == "2.28.9"


def _stand_in(path: Path, soname: str, code: int) -> Path:
    """A shared library at `path` named `soname` whose ncclGetVersion answers `code`, built with gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is needed to build the stand-in libraries (.ci/run installs it)")
    src = path.with_name(path.name + ".c")
    src.write_text(f"int ncclGetVersion(int *version) {{ *version = {code}; return 0; }}\n")
    subprocess.run([gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(src)], check=True)
    return path


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two libnccl.so.2 (2.30.7 in new/, 2.28.9 in wheel/) and user/libuser.so, which needs libnccl.so.2."""
    root = tmp_path_factory.mktemp("nccl")
    out: dict[str, Path] = {}
    for name, code in (("new", 23007), ("wheel", 22809)):
        (root / name).mkdir()
        out[name] = _stand_in(root / name / "libnccl.so.2", "libnccl.so.2", code)
    (root / "user").mkdir()
    src = root / "user" / "user.c"
    src.write_text("int ncclGetVersion(int *);\nint user_version(void) { int v = 0; ncclGetVersion(&v); return v; }\n")
    out["user"] = root / "user" / "libuser.so"
    subprocess.run([shutil.which("gcc") or "gcc", "-shared", "-fPIC", "-o", str(out["user"]), str(src),
                    str(out["wheel"])], check=True)
    return out


def _rank(libs: dict[str, Path], preload: str | None, by_path: str | None) -> tuple[str, str]:
    """In a fresh process: LD_PRELOAD `preload`, open `by_path` RTLD_LOCAL by its path (as torch opens its
    wheel's NCCL), then load libuser.so (as libtorch_cuda.so loads). Returns (what libuser's call
    returned, what nccl_lib reads)."""
    code = textwrap.dedent(f"""
        import ctypes
        from clustercheck.fabric.nccl_lib import decode, version
        if {str(libs[by_path]) if by_path else None!r}:
            ctypes.CDLL({str(libs[by_path]) if by_path else ""!r})
        user = ctypes.CDLL({str(libs["user"])!r})
        print(decode(user.user_version()), version((2, 28, 9)))
    """)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = str(libs[preload])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    bound, read = done.stdout.split()
    return bound, read


def test_rccl_loaded_by_its_own_soname_answers_too(tmp_path: Path) -> None:
    """ROCm's torch loads RCCL (librccl.so.1), which answers ncclGetVersion as NCCL does."""
    rccl = _stand_in(tmp_path / "librccl.so.1", "librccl.so.1", 22203)
    code = (f"import ctypes; ctypes.CDLL({str(rccl)!r}); from clustercheck.fabric.nccl_lib import version; "
            f"print(version((2, 21, 5)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "2.22.3"


def test_torchs_own_copy_opened_by_path(libs: dict[str, Path]) -> None:
    assert _rank(libs, preload=None, by_path="wheel") == ("2.28.9", "2.28.9")


def test_a_preloaded_nccl_beside_torchs_copy_is_the_one_named(libs: dict[str, Path]) -> None:
    # what ran on the H100: two copies mapped, the calls bound to the preload; torch says 2.28.9
    assert _rank(libs, preload="new", by_path="wheel") == ("2.30.7", "2.30.7")


def test_a_newer_nccl_opened_first_by_path_is_the_one_named(libs: dict[str, Path]) -> None:
    # a dependency on libnccl.so.2 resolves to the first loaded object of that soname, not the linked one
    assert _rank(libs, preload=None, by_path="new") == ("2.30.7", "2.30.7")
