"""What NCCL says it did, read by each rank from its own `NCCL_DEBUG_FILE`.

A timed pool logs INIT and ENV only: NCCL writes those at init and when it connects a channel (in the
warm-up), never per call, so the timed loop is untouched. The untimed *tuning* pool adds TUNING, a
line per call naming the algorithm and protocol NCCL chose; the controller runs each collective
there once per size after the timed run (same ranks, env, sizes: the same choice), and the rank
reads its log after each call, so every line is attributed to the call that wrote it (NCCL writes
the file unbuffered). The user's own NCCL_DEBUG settings are left alone, and then nothing is read.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, MutableMapping

from clustercheck.fabric import nccl_debug, nccl_net, transport

# NET adds the lines that say why GPUDirect RDMA is off ("GPU Direct RDMA Disabled for HCA ..."); NCCL writes
# them when it sets up a connection, in the warm-up, like INIT's channel lines
SUBSYS = {"init": "INIT,ENV,NET", "tuning": "INIT,ENV,NET,TUNING"}
USER_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


@dataclass
class NcclLog:
    path: Path | None
    why_not: str = ""  # when there is no log to read
    _offset: int = 0
    versions: list[str] = field(default_factory=list)
    transports: set[str] = field(default_factory=set)
    shm_between_gpus: bool = False
    nvls_capable: bool | None = None
    env: dict[str, str] = field(default_factory=dict)
    networks: list[str] = field(default_factory=list)
    net: dict[str, nccl_net.HostNet] = field(default_factory=dict)  # what this rank's NCCL said of the network
    errors: list[dict[str, Any]] = field(default_factory=list)  # network/transport WARNs, error returns (transport.py)
    unread: str = ""  # why this rank's log could not be read, while it never was: its facts are then not judged

    @classmethod
    def configure(cls, env: MutableMapping[str, str], mode: str, log_dir: str, name: str) -> NcclLog:
        """Point NCCL at this rank's log file (before NCCL initialises: it reads these once)."""
        if mode not in SUBSYS:
            return cls(None, "NCCL logging off")
        user = [v for v in USER_VARS if v in env]
        if user:
            return cls(None, f"{', '.join(user)} set by the user: NCCL's log not read")
        directory = Path(log_dir) if log_dir and Path(log_dir).is_dir() else Path(tempfile.gettempdir())
        path = directory / name
        path.unlink(missing_ok=True)  # a reused pid must not read another run's lines
        env.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS=SUBSYS[mode], NCCL_DEBUG_FILE=str(path))
        return cls(path)

    def new_text(self) -> str:
        """What NCCL wrote since the last call (complete lines only)."""
        if self.path is None:
            return ""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except OSError as exc:  # after a collective NCCL has written its init: a file missing now never came
            if not self._offset:
                self.unread = (f"NCCL wrote no log at {self.path}" if isinstance(exc, FileNotFoundError) else
                               f"cannot read {self.path} ({exc.strerror or type(exc).__name__})")
            return ""
        self.unread = ""
        data = data[: data.rfind(b"\n") + 1]
        self._offset += len(data)
        return data.decode(errors="replace")

    def read(self, collective: str) -> str | None:
        """Take in what NCCL wrote since the last call; return `algo/proto` when it logged a choice
        for this collective (the most frequent one), else None."""
        text = self.new_text()
        parsed = nccl_debug.parse(text, default_collective=collective)
        for host, found in nccl_net.channels(parsed, nccl_net.scan(text)).items():
            self.net[host] = self.net[host].merge(found) if host in self.net else found
        for v in parsed.versions:
            if v not in self.versions:
                self.versions.append(v)
        self.transports |= parsed.transport_kinds
        self.shm_between_gpus |= parsed.p2p_suspect
        if parsed.nvls_capable is not None:
            self.nvls_capable = bool(self.nvls_capable) or parsed.nvls_capable
        for k, v in parsed.env:
            self.env.setdefault(k, v)
        self.networks += [n for n in parsed.networks if n not in self.networks]
        for e in transport.errors(text):
            old = next((x for x in self.errors if x["text"] == e.text and x["host"] == e.host), None)
            if old is not None:
                old["count"] += e.count
            elif len(self.errors) < 20:
                self.errors.append({"host": e.host, "dev": e.dev, "text": e.text, "count": e.count})
        name = nccl_debug.function_name(collective)
        chosen = [(c.algo, c.proto) for c in parsed.choices if c.collective in (name, "unknown")]
        if not chosen:
            return None
        algo, proto = max(set(chosen), key=chosen.count)
        return f"{algo}/{proto}"

    def summary(self) -> dict[str, Any]:
        """What this rank's NCCL said so far, for the result (JSON)."""
        if self.path is None:
            return {"log": None, "why_not": self.why_not}
        return {"log": str(self.path), "versions": self.versions, "transports": sorted(self.transports),
                "shm_between_gpus": self.shm_between_gpus, "nvls_capable": self.nvls_capable,
                "env": self.env, "networks": self.networks,
                "net": {host: found.as_dict() for host, found in self.net.items()}, "errors": self.errors,
                **({"unread": self.unread} if self.unread else {})}


def log_name(pool: str, rank: int) -> str:
    return f"pool{pool}-nccl-rank{rank}.{os.getpid()}.log"
