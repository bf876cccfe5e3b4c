"""An agent's wait for the controller (agent.Agent.connect) keeps to its --join-timeout: a plain connection is
tried first, and torch's store client, which retries a refused connection for its whole timeout and once
more (an agent told 10 s said 'could not reach the controller within 10 s' after 17), only once it opens.
A real refused port and a real store; the clock is the test's, so nothing here waits or is timed."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from clustercheck.errors import UserError
from clustercheck.run import agent as agent_mod, gang


class Clock:
    """time.monotonic and time.sleep for the agent and gang modules: sleeping moves it, nothing else."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.slept.append(seconds)
        self.now += seconds


def _agent(port: int, tmp_path: Path) -> agent_mod.Agent:
    return agent_mod.Agent(gang.Identity(0, "n1", ("127.0.0.1", port)), "t" * 32, None, workdir=tmp_path)


def _clocked(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    for module in (agent_mod, gang):
        monkeypatch.setattr(module, "time", clock, raising=False)  # gang had no clock before the fix
    return clock


def test_a_refused_controller_is_given_up_at_the_deadline_without_the_store_client(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as bound:  # bound, never listening: every connection to it is refused at once
        bound.bind(("127.0.0.1", 0))
        port = bound.getsockname()[1]
        clock = _clocked(monkeypatch)
        clients: list[Any] = []

        def client(*args: Any, **kwargs: Any) -> Any:  # as torch's says, after 5 s or more of retrying
            clients.append(args)
            raise RuntimeError("The client socket has timed out after 5000ms")

        monkeypatch.setattr(dist, "TCPStore", client)
        with pytest.raises(UserError, match=rf"could not reach the controller at 127.0.0.1:{port} within 3 s \(.*refused"):
            _agent(port, tmp_path).connect(3.0)
    assert clients == []  # the store client, which would retry for 5 s and more each time, was never started
    assert clock.now == 1003.0 and len(clock.slept) == 3, clock.slept  # a try a second, the last at the deadline


def test_a_listening_controller_gets_its_store_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=30))
    master.set("hello", "there")
    clock = _clocked(monkeypatch)
    store = _agent(master.port, tmp_path).connect(3.0)
    assert store.get("hello") == b"there" and clock.slept == []
