"""Running a probe's tool, and refusing a capture of a tool that crashed: where skip and error are decided.

Only an absent binary is a skip (the driver or package is not installed on this machine); a file of that
name on PATH that cannot be executed is there, broken, and an error. A tool that
exits non-zero, is killed, times out or cannot start is an error naming the command, its exit status and
the first line of its stderr: nvidia-smi exits non-zero when a GPU has fallen off the bus ("Unable to
determine the device handle for GPU0000:1B:00.0: Unknown Error"), and that must never read as "not
applicable here".
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from typing import Sequence

from clustercheck.probes.base import ProbeParseError, ProbeSkip


class ToolError(RuntimeError):
    """The tool is installed but did not answer: a harness error for the probe, never a pass or a skip."""


def run(argv: Sequence[str], missing: str, timeout: float = 120.0) -> str:
    """stdout of `argv`; ProbeSkip(missing) when argv[0] is not on PATH, ToolError when it fails."""
    path = locate(argv[0])
    if path is None:
        raise ProbeSkip(missing)
    shown = " ".join(argv)
    try:
        out = subprocess.run([path, *argv[1:]], capture_output=True, text=True, errors="replace",
                             timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ToolError(f"`{shown}` did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise ToolError(f"`{shown}` could not start: {exc.strerror or exc}") from None
    if out.returncode != 0:
        raise ToolError(f"`{shown}` {_status(out.returncode)}: {_first_line(out.stderr, out.stdout)}")
    return out.stdout


def locate(name: str) -> str | None:
    """The executable `name` on PATH (or at `name` itself, when it holds a slash); None only where no file of
    that name is there. A file that is there but not executable (a lost mode bit, a noexec mount seen by
    shutil.which as absent) is a ToolError: the tool is installed and broken, never "not installed here"."""
    path = shutil.which(name)
    if path is not None:
        return path
    places = [name] if os.sep in name else [os.path.join(d or os.curdir, name) for d in os.get_exec_path()]
    for place in places:
        if os.path.isfile(place):
            raise ToolError(f"`{name}` is at {place} but not executable")
    return None


def _status(code: int) -> str:
    if code < 0:  # subprocess reports death by signal N as -N
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _first_line(stderr: str, stdout: str) -> str:
    """stderr's first non-blank line; nvidia-smi prints some errors on stdout, so that comes second."""
    for name, text in (("stderr", stderr), ("stdout", stdout)):
        line = next((l.strip() for l in text.splitlines() if l.strip()), "")
        if line:
            return f"{name}: {line[:300]}"
    return "no output on stderr or stdout"


# A program that died prints one of these as the shell or the C++ runtime reports it; the text before it
# is a partial run, so a probe must not judge it (a crashed nvbandwidth log still carries "Driver Version").
_CRASH = re.compile(r"^(?:(?:Aborted|Segmentation fault|Bus error|Illegal instruction|Floating point exception"
                    r"|Killed)(?: \(core dumped\))?|.*\(core dumped\)|terminate called after throwing an instance"
                    r" of .*)$")


def refuse_crashed(text: str) -> None:
    """ProbeParseError naming the line (numbered as in the file) when the capture shows a crashed program."""
    for number, line in enumerate(text.splitlines(), 1):
        if _CRASH.match(line.strip()):
            raise ProbeParseError(f"line {number}: {line.strip()!r}: the captured program crashed, so its "
                                  f"output is partial and cannot be judged")
