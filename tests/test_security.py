"""Hostile suites and captures, through the real `clustercheck` command: no suite field makes a rank or
the controller run a file of the author's choosing, ids and env values cannot carry control bytes, and
`probe --input` reads a bounded amount of text and prints tool text escaped (docs/security.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clustercheck.suite import envpolicy
from helpers import CPU_THRESHOLDS, clustercheck_here, small_check
from evidence import TOOLS

DELLA = TOOLS / "nvidia-smi-topo" / "della-8xh100-nv18-6nic-empty-cpu-affinity-tabs.txt"
_SCRIPT = Path(sys.executable).parent / "clustercheck"
CLUSTERCHECK = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "clustercheck"]


def cc(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLUSTERCHECK, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env={**os.environ, **(env or {})})


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused input: exit 4, nothing on stdout, no traceback, no raw control byte."""
    assert out.returncode == 4, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and out.stdout == "", out.stdout + out.stderr
    assert lines[0].isprintable(), repr(lines[0])
    return lines[0].removeprefix("clustercheck: error: ")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "th").mkdir()
    (tmp_path / "th" / "cpu.yaml").write_text(CPU_THRESHOLDS)
    return tmp_path


def suite_with_env(name: str, value: str) -> str:
    """A suite whose only check sets `name` on line 6 (YAML double quotes keep `value` literal)."""
    quoted = value.replace("\\", "\\\\").replace('"', '\\"')
    return small_check("ok") + f'    env:\n      {name}: "{quoted}"\n'


# -- payloads: each would create `marker` if the variable reached a process ------------------------

def python_payload(tmp: Path, marker: Path) -> str:
    """A directory for PYTHONPATH whose sitecustomize.py, imported by every Python at start, writes marker."""
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return str(site)


def preload_payload(tmp: Path, marker: Path) -> str:
    """A shared library for LD_PRELOAD whose constructor writes marker."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the LD_PRELOAD payload")
    src, lib = tmp / "evil.c", tmp / "evil.so"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void) {\n'
                   f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}\n}}\n')
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=120)
    return str(lib)


def path_payload(tmp: Path, marker: Path) -> str:
    """A directory for PATH holding an `srun` (the slurm launcher runs srun by name) that writes marker."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f"#!/bin/sh\necho ran > '{marker}'\n")
    srun.chmod(0o755)
    return str(bin_dir)


@pytest.mark.parametrize("name, payload, probe", [
    ("PYTHONPATH", python_payload, [sys.executable, "-c", "pass"]),
    ("LD_PRELOAD", preload_payload, ["/bin/true"]),
    ("PATH", path_payload, ["srun"]),  # the controller's own Popen(["srun", ...], env=...) searches env's PATH
])
def test_no_suite_env_runs_a_file_of_the_authors_choosing(tree: Path, name, payload, probe) -> None:
    marker = tree / "payload-ran"
    value = payload(tree, marker)
    # the payload is live: any process started with this variable runs it
    subprocess.run(probe, env={**os.environ, name: value}, check=False, timeout=120)
    assert marker.exists(), f"the {name} payload did not run; this test would prove nothing"
    marker.unlink()
    (tree / "bad.yaml").write_text("checks:\n" + suite_with_env(name, value))
    slurm = name == "PATH"  # srun is what the controller would run by name
    out = cc("run", "bad.yaml", "--thresholds", "th", "--out", "o", *(["--launcher", "slurm"] if slurm else []),
             cwd=tree, env={"SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": "7"} if slurm else None)
    assert one_error_line(out).startswith(f"bad.yaml:6: checks[0].env.{name}: ")
    assert not marker.exists(), f"{name} from a suite ran the author's file"


@pytest.mark.parametrize("name", [
    "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "BASH_ENV", "ENV", "IFS",
    "GCONV_PATH", "MALLOC_PRELOAD", "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
    "NCCL_ENV_PLUGIN", "NCCL_CONF_FILE", "NCCL_DEBUG_FILE", "NCCL_TOPO_FILE", "NCCL_TOPO_DUMP_FILE",
    "NCCL_GRAPH_DUMP_FILE", "NCCL_COMM_ID", "CUDA_INJECTION64_PATH", "CUDA_CACHE_PATH", "OMP_TOOL_LIBRARIES",
    "HSA_TOOLS_LIB", "FI_PROVIDER_PATH", "UCX_MODULE_DIR", "UCX_GDB_COMMAND", "UCX_STATS_DEST",
    "NVSHMEM_BOOTSTRAP_PLUGIN", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "SLURM_TASK_PROLOG", "SSH_ASKPASS",
    "OMPI_MCA_plm_rsh_agent", "CC_POOL_KEY", "HOME", "TMPDIR", "nccl_algo",
])
def test_loader_plugin_and_file_variables_are_refused_naming_file_line_and_key(tree: Path, name: str) -> None:
    (tree / "bad.yaml").write_text("checks:\n" + suite_with_env(name, "/tmp/x"))
    text = one_error_line(cc("run", "bad.yaml", "--thresholds", "th", cwd=tree))
    assert text.startswith(f"bad.yaml:6: checks[0].env.{name}: '{name}' "), text


def test_the_deny_list_wins_over_the_allowed_prefixes() -> None:
    for name in ("NCCL_NET_PLUGIN", "CUDA_INJECTION64_PATH", "OMP_TOOL_LIBRARIES", "UCX_MODULE_DIR"):
        assert name.startswith(envpolicy.ALLOWED_PREFIXES) and envpolicy.name_problem(name), name
    for name in ("NCCL_ALGO", "NCCL_P2P_DIRECT_DISABLE", "NCCL_IB_TIMEOUT", "NCCL_SOCKET_IFNAME", "CUDA_VISIBLE_DEVICES",
                 "TORCH_NCCL_ASYNC_ERROR_HANDLING", "GLOO_SOCKET_IFNAME", "FI_PROVIDER", "OMP_NUM_THREADS"):
        assert envpolicy.name_problem(name) is None, name


@pytest.mark.pool
def test_an_allowed_variable_still_loads_and_runs(tree: Path) -> None:
    (tree / "ok.yaml").write_text("checks:\n" + small_check("ok") + "    env: {NCCL_ALGO: Ring, OMP_NUM_THREADS: 1}\n")
    out = clustercheck_here("run", "ok.yaml", "--thresholds", "th", "--out", "o", cwd=tree)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("value, why", [
    ("Ring\0", "control character"), ("Ring\nTree", "control character"), ("\x1bc", "control character"),
    ("x" * (envpolicy.MAX_VALUE + 1), "at most 4096"),
])
def test_env_values_with_control_bytes_or_too_long_are_refused(tree: Path, value: str, why: str) -> None:
    escaped = value.encode("unicode_escape").decode("ascii")  # YAML double quotes read \0 \n \x1b back
    (tree / "bad.yaml").write_text("checks:\n" + small_check("ok") + f'    env:\n      NCCL_ALGO: "{escaped}"\n')
    text = one_error_line(cc("run", "bad.yaml", "--thresholds", "th", cwd=tree))
    assert text.startswith("bad.yaml:6: checks[0].env.NCCL_ALGO: ") and why in text and len(text) < 400, text


@pytest.mark.parametrize("extra, line, key", [
    ("    inject_fault: hang\n", 5, "checks[0].inject_fault"),
    ("    params: {sizes: [1KiB], inject: hang}\n", 5, "checks[0].params.inject"),
])
def test_a_suite_cannot_inject_faults(tree: Path, extra: str, line: int, key: str) -> None:
    body = "checks:\n  - id: ok\n    measure: all_reduce\n    timeout: 30\n" + extra
    (tree / "bad.yaml").write_text(body)
    text = one_error_line(cc("run", "bad.yaml", "--thresholds", "th", cwd=tree))
    assert text.startswith(f"bad.yaml:{line}: {key}: unknown key"), text


def test_nothing_in_clustercheck_runs_a_shell() -> None:
    """Processes are started from argument lists only, so no suite text is ever parsed by a shell."""
    package = Path(__file__).resolve().parent.parent / "clustercheck"
    calls = ("shell=True", "os.system(", "os.popen(", "pty.spawn(", "os.exec")
    found = [f"{path.relative_to(package)}:{n}: {line.strip()}" for path in sorted(package.rglob("*.py"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if any(call in line for call in calls)]
    assert found == []


# -- check ids ------------------------------------------------------------------------------------

@pytest.mark.parametrize("check_id", [r'"a\ec"', r'"ab\bc"', r'"a\x7f"', r'"a\0b"', r'"a\x9bb"', '"a b"', '"a/b"',
                                      '"-rf"', '"a<b>"', '"a::b"', '"x[1]"', '"' + "a" * 101 + '"', '""'])
def test_check_ids_outside_the_safe_charset_are_refused(tree: Path, check_id: str) -> None:
    (tree / "bad.yaml").write_text(f"checks:\n  - id: {check_id}\n    measure: all_reduce\n")
    text = one_error_line(cc("run", "bad.yaml", "--thresholds", "th", cwd=tree))
    assert text.startswith("bad.yaml:2: checks[0].id: ") and "letters, digits" in text, text


def test_ids_the_shipped_suites_use_are_in_the_charset() -> None:
    from clustercheck.suite.load import ID, load_suite

    suites = sorted((Path(__file__).resolve().parent.parent / "suites").glob("*.yaml"))
    ids = [c.id for s in suites for c in load_suite(s).checks]
    assert ids and all(ID.fullmatch(i) for i in ids) and "allreduce-small-latency" in ids


# -- probe --input: bounded, text only, escaped on the way out ----------------------------------------

def test_dev_zero_fails_fast_naming_the_cap(tmp_path: Path) -> None:
    start = time.monotonic()
    text = one_error_line(cc("probe", "topo", "--input", "/dev/zero", cwd=tmp_path, timeout=60))
    assert "/dev/zero" in text and "64 MiB" in text and time.monotonic() - start < 30


@pytest.mark.parametrize("content, why", [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4, "binary"),
    (DELLA.read_text().encode("utf-16"), "UTF-16"),  # with its BOM, as PowerShell's > writes it
    (DELLA.read_text().encode("utf-16-be"), "binary"),  # no BOM: NUL in every other byte
    (bytes(range(128, 256)) * 64, "not UTF-8"),
])
def test_binary_and_utf16_input_is_one_line(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / "capture.txt").write_bytes(content)
    text = one_error_line(cc("probe", "topo", "--input", "capture.txt", cwd=tmp_path))
    assert text.startswith("capture.txt: ") and why in text, text


def test_a_directory_a_fifo_and_an_unreadable_file_are_one_line(tmp_path: Path) -> None:
    assert "is a directory" in one_error_line(cc("probe", "topo", "--input", ".", cwd=tmp_path))
    os.mkfifo(tmp_path / "fifo")  # open() would wait for a writer forever
    assert "FIFO" in one_error_line(cc("probe", "topo", "--input", "fifo", cwd=tmp_path, timeout=60))
    if Path("/proc/self/mem").exists():  # a file even root cannot read from offset 0
        assert "cannot read" in one_error_line(cc("probe", "topo", "--input", "/proc/self/mem", cwd=tmp_path))


def test_a_utf8_bom_is_read_as_the_same_capture(tmp_path: Path) -> None:
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + DELLA.read_bytes())
    plain = cc("probe", "topo", "--input", str(DELLA), "--platform", "h100-sxm-8x", cwd=tmp_path)
    bom = cc("probe", "topo", "--input", "bom.txt", "--platform", "h100-sxm-8x", cwd=tmp_path)
    assert plain.returncode == bom.returncode == 0 and plain.stdout == bom.stdout, bom.stdout + bom.stderr


def test_tool_text_with_terminal_controls_is_printed_escaped(tmp_path: Path) -> None:
    hostile = "mlx5_0\x1bc\x08\x7f\x9b2J"  # ESC c resets a terminal, CSI 2J clears it
    capture = DELLA.read_text().replace("NIC0: mlx5_0", f"NIC0: {hostile}")
    (tmp_path / "topo.txt").write_text(capture)
    out = cc("probe", "topo", "--input", "topo.txt", "--expect", "topology.gpu_nic=PIX", cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr  # GPU1 has no PIX NIC: a FAIL line is printed too
    gpu0 = next(line for line in out.stdout.splitlines() if line.startswith("PASS GPU0: nearest NIC"))
    assert gpu0 == r"PASS GPU0: nearest NIC: NIC0 (mlx5_0\x1bc\x08\x7f\x9b2J) at PIX"
    assert all(line.isprintable() for line in out.stdout.splitlines()), out.stdout
