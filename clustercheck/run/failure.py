"""How a task failed on the ranks, told cause first: what the ranks have said so far (`Heard`), the
exception a failed task raises (`RankFailure`, with the results of the ranks that did answer), and the
readers of the evidence the story quotes: a rank's NCCL warnings, exit statuses and rank ranges."""

from __future__ import annotations

import re
import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from clustercheck.errors import HarnessError

NAMED = 8  # ranks named one by one (and quoted) in a failure message; more are summarised
# What a rank raises when another rank went away mid-collective (gloo, NCCL): a symptom, not a cause.
PEER_LOST = re.compile(r"reset by peer|closed by peer|broken pipe|connection refused|remote process exited|"
                        r"ncclRemoteError|remote peer", re.IGNORECASE)
_NCCL_WARN = re.compile(rb" NCCL WARN ")


def nccl_warnings(log_dir: Path, pool: int, rank: int, lines: int = 3) -> tuple[str, str]:
    """(file, its last `lines` NCCL WARN lines) from this rank's NCCL debug file
    (measure.nccl_log.log_name; the newest where a rank restarted); ("", "") without one."""
    try:
        files = sorted(log_dir.glob(f"pool{pool}-nccl-rank{rank}.*.log"), key=lambda f: f.stat().st_mtime)
        if not files:
            return "", ""
        with files[-1].open("rb") as fh:
            warned = deque((ln for ln in fh if _NCCL_WARN.search(ln)), maxlen=lines)
    except OSError:
        return "", ""
    return str(files[-1]), b"".join(warned).decode(errors="replace").rstrip()


class RankFailure(HarnessError):
    """Some ranks did not complete a task. The message names the likely cause first; `answered` holds
    the results of the ranks that did answer, so that groups the failure did not touch (other nodes of
    a node-scoped check) keep their outcome, and `failed` the ranks without one."""

    def __init__(self, message: str, answered: dict[int, Any] | None = None,
                 failed: frozenset[int] = frozenset(), unreachable: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.answered = answered or {}
        self.failed = failed
        self.unreachable = unreachable  # nodes whose every silent rank stopped beating: unreachable or dead


@dataclass
class Heard:
    """What the ranks have said about one task so far: results, errors raised, and deaths."""
    ok: dict[int, Any] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    dead: dict[int, str] = field(default_factory=dict)
    idle: frozenset[int] = frozenset()  # in no group of the task: they post nothing (their `ok` is IDLE)
    groups: tuple[frozenset[int], ...] = ()  # the task's groups of ranks; none: the whole world at once

    def accounted(self) -> set[int]:
        return {*self.ok, *self.errors, *self.dead}

    def hear(self, rank: int, payload: dict[str, Any]) -> None:
        """A rank's answer, unsealed: its result, or the error it raised."""
        if payload["ok"]:
            self.ok[rank] = payload["result"]
        else:
            self.ok.pop(rank, None)  # an idle rank's error replaces its IDLE
            self.errors[rank] = payload["error"]

    def awaited(self) -> set[int]:
        """The ranks still to hear from in the groups that share no rank with one that died or raised: they
        measure apart from the failure (another node of a node check, another pair of a round), so their
        groups keep their own results once they answer."""
        bad = {*self.errors, *self.dead}
        return {r for g in self.groups if bad.isdisjoint(g) for r in g if r not in self.ok}


def quote(ranks: list[int], logs: list[Path], log_dir: Path, pool: int, lines: int = 6) -> str:
    """The last output lines of these ranks (those that wrote any, in `logs`), to say what they were doing,
    and NCCL's last warnings: with NCCL_DEBUG_FILE set (the timed pools) NCCL writes them there, not to
    the rank's output, and they are usually the reason ("Duplicate GPU detected", "unhandled system
    error")."""
    parts = [f"\n--- rank {r} last output ({logs[min(r, len(logs) - 1)]}):\n{text}" for r in ranks[:NAMED]
             if r < len(logs) and (text := log_tail(logs[r], lines))]
    parts += [f"\n--- rank {r} NCCL warnings ({where}):\n{text}" for r in ranks[:NAMED]
              for where, text in [nccl_warnings(log_dir, pool, r)] if text]
    more = f"\n--- (the other {len(ranks) - NAMED}: {log_dir})" if len(ranks) > NAMED else ""
    if not parts:
        return f" (no output from the first {NAMED}){more}" if more else " (no output from them)"
    return "".join(parts) + more


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    spans: list[list[int]] = []
    for r in sorted(ranks):
        if spans and r == spans[-1][1] + 1:
            spans[-1][1] = r
        else:
            spans.append([r, r])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def rank_names(ranks: list[int], host: Callable[[int], str]) -> str:
    """The ranks by name and host; many of them (a hung cluster-wide collective) in one short line."""
    if len(ranks) <= NAMED:
        return ", ".join(f"rank {r} ({host(r)})" for r in ranks)
    from clustercheck.record.exclude import as_hostlist

    hosts = sorted({host(r) for r in ranks})
    return f"{len(ranks)} ranks ({rank_ranges(ranks)}) on {len(hosts)} node(s) {as_hostlist(hosts)}"


def exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def log_tail(path: Path, lines: int) -> str:
    """The last `lines` lines of a log, "" when it cannot be read."""
    try:
        with path.open("rb") as fh:
            return b"".join(deque(fh, maxlen=lines)).decode(errors="replace").rstrip()
    except OSError:
        return ""


def silent_story(silent: list[int], before: Mapping[int, str], after: Mapping[int, str],
                 names: Callable[[list[int]], str], waited: float) -> tuple[str, frozenset[int]]:
    """Who of the ranks that did not answer in time is the likely cause: one whose heartbeat counter stood
    still over `waited` seconds (or never beat) stopped answering, unreachable or dead; one whose counter
    moved on is alive and waiting for it (a counter read lower than before is a replayed beat, not a live
    one). (text, the ranks that stopped)."""
    def moved(r: int) -> bool:
        now, then = after.get(r), before.get(r)
        return now is not None and (then is None or int(now) > int(then))

    stopped = frozenset(r for r in silent if not moved(r))
    waiting = [r for r in silent if r not in stopped]
    parts = []
    if stopped:
        parts.append(f"{names(sorted(stopped))} stopped answering (no heartbeat in {waited:g} s: unreachable or dead)")
    if waiting:
        parts.append(f"alive and waiting: {names(waiting)}" if stopped else
                     f"no answer from {names(waiting)}, each still alive (its heartbeat moved): a task slower than "
                     f"its timeout, or a rank hung in its own code")
    return "; ".join(parts), stopped
