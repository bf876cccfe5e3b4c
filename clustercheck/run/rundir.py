"""The run directory: made under --out, unique, and pointed at by `DIR/latest`, a link clustercheck makes
and replaces, and never anything else of that name (it is neither unlinked nor followed)."""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from clustercheck.errors import UserError
from clustercheck.record.io import RecordWriteError


def make_dir(out: Path, path: Path) -> None:
    """Create a directory under --out; one line, not a traceback, when --out names a file, /proc or a
    read-only place."""
    try:
        path.mkdir(parents=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the run directory {path} "
                        f"({exc.strerror or type(exc).__name__})") from None


def unique(path: Path) -> Path:
    """Make the run directory `path` (under --out, its parent), or `path`-2, -3, ... where that name is
    taken: the first this call creates (mkdir, never exist_ok), so that two runs started in one --out in
    one second never pick one name (a look for the name, then its making, let the later run be refused as
    bad input, exit 4, for the other run's doing). One line, not a traceback, where it cannot be made."""
    candidate, n = path, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError as exc:
            if not path.parent.is_dir():  # a file where --out (or a directory above it) would be made
                raise UserError(f"--out {path.parent}: cannot create the run directory {candidate} "
                                f"({exc.strerror})") from None
            n += 1
            candidate = path.with_name(f"{path.name}-{n}")
        except OSError as exc:
            raise UserError(f"--out {path.parent}: cannot create the run directory {candidate} "
                            f"({exc.strerror or type(exc).__name__})") from None


@contextmanager
def opening(out: Path, run_dir: Path) -> Iterator[None]:
    """Write into `run_dir` (as unique() made it) what is written into it first (the inputs kept, the
    record's header and plan). A full disk or a file system gone read-only then is one line naming the
    file, and the directory goes: nothing ran. (`latest` points at it only once the run has started:
    CheckSession.start.)"""
    try:
        yield
    except (OSError, RecordWriteError) as exc:
        shutil.rmtree(run_dir, ignore_errors=True)
        why = str(exc).split("; the record holds")[0] if isinstance(exc, RecordWriteError) else \
            f"cannot write {exc.filename or run_dir}: {exc.strerror or type(exc).__name__}"
        raise UserError(f"--out {out}: {why}; nothing was measured") from None


STALE_AFTER = 3600.0  # seconds untouched after which a dead pid's .starting-<pid> directory is a leftover


def sweep_starting(out: Path) -> None:
    """Remove the `.starting-<pid>` directories under --out (a run's first logs, until its run directory
    exists: run/prestart.py, run/nodefacts.py) that a controller killed outright (SIGKILL, the OOM killer)
    left for good: only those whose pid lives no more on this host, and untouched for STALE_AFTER s, as a
    --out on a shared file system may hold the directory of a live run started on another host (its pid,
    unknown here, would read as dead), whose start never takes that long."""
    now = time.time()
    for found in out.glob(".starting-*"):
        pid = found.name.removeprefix(".starting-")
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another user's: PermissionError below)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        try:
            touched = max(p.lstat().st_mtime for p in (found, *found.iterdir()))
        except OSError:
            continue
        if now - touched > STALE_AFTER:
            shutil.rmtree(found, ignore_errors=True)


def point_latest(out: Path, run_dir: Path) -> None:
    """Point `latest` at the new run: a new link renamed over the old one (rename never follows a link),
    and only over a link clustercheck made (check_latest refused anything else before the run)."""
    link = out / "latest"
    if latest_problem(link):
        return  # made since the run started: left alone
    tmp = out / f".latest.tmp{os.getpid()}"
    try:
        tmp.symlink_to(run_dir.name)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)  # a convenience only


def check_latest(out: Path) -> None:
    """`DIR/latest` is replaced at each run: refuse, before anything runs, one clustercheck did not make."""
    why = latest_problem(out / "latest")
    if why:
        raise UserError(f"--out {out}: {out / 'latest'} {why}; clustercheck replaces only the link it made "
                        "(move it away, or give another --out)")


def latest_problem(link: Path) -> str | None:
    """Why `link` is not a `latest` link clustercheck made (a symlink to a sibling run directory by its
    bare name), or None when it is one or there is none: nothing else is ever unlinked or followed."""
    if not link.is_symlink():
        return None if not os.path.lexists(link) else ("is a directory" if link.is_dir() else "is not a link")
    target = os.readlink(link)
    if "/" in target or target in ("", ".", ".."):
        return f"is a link to {target!r}, not to a run directory beside it"
    return None


def space_problem(run_dir: Path, repetitions_left: float, margin: float = 1.25) -> str | None:
    """After a repeated run's first repetition: whether the file system holding `run_dir` has room for the
    record and logs the remaining repetitions will write at the rate the first one did (a week of burn-in
    must not stop on a full disk on day six); why not, or None."""
    import shutil

    grown = sum(f.stat().st_size for f in run_dir.rglob("*") if f.is_file())
    need = int(grown * max(repetitions_left, 0) * margin)
    try:
        free = shutil.disk_usage(run_dir).free
    except OSError:
        return None  # unknown: not a reason to stop
    if need <= free:
        return None
    return (f"repetition 1 wrote {_mib(grown)} of record and logs; {repetitions_left:.0f} more need about "
            f"{_mib(need)} and {run_dir.parent} has {_mib(free)} free")


def _mib(nbytes: float) -> str:
    return f"{nbytes / (1 << 20):.1f} MiB"
