"""Nodes lost mid-run (their agent or ranks stopped answering) and whom that blames. A node whose loss
the launcher cannot account for is unreachable or dead: its items are `Unreachable` errors naming it, and
it goes on the exclusion list. One whose agent Kubernetes or the harness ended (`Launcher.loss`: its pod
evicted, preempted, deleted or OOM-killed, or the agents' Job failed) is excused: its items are plain
errors that say so, and it is only not measured, never excluded, never tainted."""

from __future__ import annotations

from typing import Any, Collection, Iterable, Sequence

from clustercheck.errors import HarnessError, Unreachable
from clustercheck.run import scopes
from clustercheck.run.launcher import Launcher
from clustercheck.run.scopes import Where

SILENT = "its ranks stopped answering (no heartbeat: unreachable or dead)"


class Losses:
    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = list(nodes)
        # node lost mid-run -> "h3 was lost during <check> (<why>)": each later item of its is an error saying so
        self.lost: dict[str, str] = {}
        # node -> the launcher's words, where its agent was ended by the orchestrator or the harness: not blamed
        self.excused: dict[str, str] = {}
        # node -> the launcher's words where it blames the node all the same (its pod could not be read, its node
        # NotReady): said in why(), never dropped
        self.told: dict[str, str] = {}

    def ask(self, launcher: Launcher, nodes: Iterable[str]) -> None:
        """How each node newly found unreachable was lost, as the launcher tells it (asked once a node)."""
        new = [node for node in nodes if node not in self.excused]
        if new:
            launcher.losing()  # found lost together: one window for them all to say how they ended
        for node in new:
            loss = launcher.loss(node)
            if loss is not None and not loss.blamed:
                self.excused[node] = loss.why
            elif loss is not None and loss.why:
                self.told[node] = loss.why

    def why(self, launcher: Launcher, node: str) -> str:
        """Why `node` was lost, in the launcher's words, with what the orchestrator said where it ended it."""
        said = launcher.why_lost(node) or SILENT
        told = self.excused.get(node) or self.told.get(node)
        return f"{said}: {told}" if told else said

    def blame(self, text: str, nodes: Collection[str]) -> HarnessError:
        """The error of an item that lost `nodes`: Unreachable naming those to blame (the exclusion list takes
        them), else a plain error; an excused node's first line says what ended its agent."""
        blamed = tuple(n for n in nodes if n not in self.excused)
        told = [f"{n}: {self.excused[n]}" for n in nodes if n in self.excused and self.excused[n] not in text]
        if told:
            first, sep, rest = text.partition("\n")
            text = f"{first}; {'; '.join(told)}{sep}{rest}"
        return Unreachable(text, blamed) if blamed else HarnessError(text)

    def gone(self, items: list[Where]) -> tuple[list[Where], dict[Where, Any]]:
        """(the items to measure, the errors of those that cover a node lost mid-run, named by their planned
        names and naming the lost node `unreachable` unless excused, so that it stays on the exclusion list)."""
        keep: list[Where] = []
        out: dict[Where, Any] = {}
        for where in items:
            gone = [n for n in (where.split(",") if where else ()) if n in self.lost]
            if gone:
                out[where] = self.blame("not measured: " + "; ".join(self.lost[n] for n in gone), gone)
            else:
                keep.append(where)
        return keep, out

    def cost(self, items: list[Where], exc: HarnessError, prefix: str = "") -> dict[Where, Any]:
        """The error of each item `exc` cost its result: Unreachable naming the nodes of the item's that stopped
        answering (they go on the exclusion list, unless excused), else a plain HarnessError."""
        out: dict[Where, Any] = {}
        for where in items:
            named = exc.nodes if isinstance(exc, Unreachable) else getattr(exc, "unreachable", ())
            gone = tuple(n for n in named if n in scopes.members(where, self.nodes))
            if gone or not named:
                out[where] = self.blame(f"{prefix}{exc}", gone) if gone else HarnessError(f"{prefix}{exc}")
            else:  # the pool lost only nodes outside this item (a pair's): say so, never as if its own were
                out[where] = HarnessError(f"{prefix or 'not measured: '}the check's ranks lost "
                                          f"{', '.join(named)}, outside this item: {exc}")
        return out


def lost_any(found: Any) -> bool:
    """Whether a check's outcomes (where -> outcome or error, or one error for them all) lost a node."""
    return any(isinstance(v, Unreachable) for v in (found.values() if isinstance(found, dict) else (found,)))
