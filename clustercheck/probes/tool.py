"""Running a probe's tool, and refusing a capture of a tool that crashed: where skip and error are decided.

Only an absent binary is a skip (the driver or package is not installed on this machine); a file of that
name on PATH that cannot be executed is there, broken, and an error. A tool that
exits non-zero, is killed, times out or cannot start is an error naming the command, its exit status and
the first line of its stderr: nvidia-smi exits non-zero when a GPU has fallen off the bus ("Unable to
determine the device handle for GPU0000:1B:00.0: Unknown Error"), and that must never read as "not
applicable here". So is one that prints more than MAX_OUTPUT on stdout (read with that cap, never
whole): it is stopped, and on a timeout too the whole session it started is killed, not the tool alone.
A capture holding the tool's own error line (`OwnErrors`, declared by each probe) fails, naming the line.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Sequence

from clustercheck.probes.base import ProbeParseError, ProbeSkip, ProbeVerdict


class ToolError(RuntimeError):
    """The tool is installed but did not answer: a harness error for the probe, never a pass or a skip."""


# The most stdout a tool may print, and the most `probe --input` reads (cli.MAX_INPUT): a report is kilobytes,
# and past this it is a runaway, not a report.
MAX_OUTPUT = 64 << 20
_STDERR_KEPT = 1 << 20  # the error names stderr's first line; the rest is drained, not kept


def run(argv: Sequence[str], missing: str, timeout: float = 120.0) -> str:
    """stdout of `argv`; ProbeSkip(missing) when argv[0] is not on PATH, ToolError when it fails.

    The tool runs in a session of its own, so a timeout or a runaway output kills what it started too (a
    wrapper script's child would otherwise keep the GPU busy, or the pipe open, after the wrapper is gone)."""
    path = locate(argv[0])
    if path is None:
        raise ProbeSkip(missing)
    shown = " ".join(argv)
    try:
        proc = subprocess.Popen([path, *argv[1:]], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, bufsize=0, start_new_session=True)
    except OSError as exc:
        raise ToolError(f"`{shown}` could not start: {exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout
    try:
        stdout, stderr = _read(proc, shown, deadline, timeout)
        code = proc.wait(max(deadline - time.monotonic(), 0))  # both pipes closed; the tool itself may linger
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise ToolError(f"`{shown}` did not finish within {timeout:g} s") from None
    except BaseException:
        _kill(proc)
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    out = stdout.decode("utf-8", errors="replace")
    if code != 0:
        raise ToolError(f"`{shown}` {_status(code)}: {_first_line(stderr.decode('utf-8', errors='replace'), out)}")
    return out


def _read(proc: subprocess.Popen[bytes], shown: str, deadline: float, timeout: float) -> tuple[bytes, bytes]:
    """stdout (at most MAX_OUTPUT bytes) and the head of stderr, read together until both close: a tool
    that fills the stderr pipe while stdout is read would otherwise block for ever."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(shown, timeout)
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data is out:
                    out += chunk
                    if len(out) > MAX_OUTPUT:
                        raise ToolError(f"`{shown}` printed more than {MAX_OUTPUT >> 20} MiB: a runaway, not one "
                                        f"tool's report; it was stopped")
                elif len(err) < _STDERR_KEPT:
                    err += chunk
    return bytes(out), bytes(err)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tool's whole session (its children with it), then reap the tool. Its process group
    outlives the tool while a child is in it, and the tool is not reaped before this, so the group id
    cannot name anyone else's processes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


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


@dataclass(frozen=True)
class OwnErrors:
    """The lines a tool prints about its own failure inside an otherwise normal report: nvidia-smi's
    `Unable to determine the device handle for GPU 0000:DB:00.0: Unknown Error` before the GPUs it could
    read, ibstat's `ibpanic: ...`. Each probe declares its tool's; `subject` finds what the line names."""

    tool: str
    phrases: tuple[str, ...]
    subject: str = ""  # a regex whose first group names the GPU or device; the node where it finds none
    label: str = "{}"  # the verdict's subject from that group: "GPU {}" gives "GPU 0000:DB:00.0"

    def find(self, line: str) -> bool:
        return any(p in line for p in self.phrases)

    def verdict(self, number: int, line: str) -> ProbeVerdict:
        m = re.search(self.subject, line) if self.subject else None
        return ProbeVerdict(self.label.format(m.group(1)) if m else "node", f"{self.tool} error", False,
                            f"line {number}: {self.tool} printed its own error {line[:200]!r}: what it could not "
                            f"read is missing from the capture, so the rest cannot pass", line[:200], "no error line")


class ToolReported(ProbeParseError):
    """The capture holds its tool's own error lines: failed verdicts naming each, never a pass of what else it
    printed. A ProbeParseError, so a reader that does not know it still refuses the capture, never judges it."""

    def __init__(self, verdicts: tuple[ProbeVerdict, ...]) -> None:
        super().__init__("; ".join(v.detail for v in verdicts))
        self.verdicts = verdicts


def refuse_crashed(text: str, own: OwnErrors | None = None) -> None:
    """ProbeParseError naming the line (numbered as in the file) when the capture shows a crashed program;
    ToolReported, a failed verdict per line, when it holds one of the tool's `own` error lines."""
    reported = []
    for number, line in enumerate(text.splitlines(), 1):
        if _CRASH.match(line.strip()):
            raise ProbeParseError(f"line {number}: {line.strip()!r}: the captured program crashed, so its "
                                  f"output is partial and cannot be judged")
        if own is not None and own.find(line):
            reported.append(own.verdict(number, line.strip()))
    if reported:
        raise ToolReported(tuple(reported))
