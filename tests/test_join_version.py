"""One clustercheck across a run: the controller refuses a join from an agent of another version (its wire,
and how the ranks' answers are read, are that version's). A node whose agent ran an older install read its
facts in a shape the controller's reader did not know, and the run ended in pytest's INTERNALERROR; now that
index never joined, with the reason, and the run is INCOMPLETE."""

from __future__ import annotations

from typing import Any

import pytest

from clustercheck import __version__
from clustercheck.run import gang, wire
from clustercheck.run.join import JoinLauncher


def joined(infos: list[dict[str, Any]]) -> tuple[JoinLauncher, dict[int, str]]:
    import torch.distributed as dist

    launcher = JoinLauncher(len(infos), "127.0.0.1:29412", token="t" * 64, gather=False)
    launcher.store = dist.HashStore()
    for info in infos:
        nonce = "cd" * (gang.NONCE // 2)
        key = gang.agent_key(launcher.token, launcher.nonce, nonce)
        launcher.store.set(gang.join_key(info["index"]), nonce + wire.seal(key, info))
    return launcher, launcher._read_joins()


@pytest.mark.parametrize("version, said", [("0.0.9", "runs clustercheck '0.0.9'"), (None, "runs an earlier clustercheck")])
def test_an_agent_of_another_version_never_joins_and_is_named(version: str | None, said: str) -> None:
    info = {"index": 0, "node": "n0", "local_ranks": None, "host": "pod", "pid": 1}
    launcher, bad = joined([{**info, **({"version": version} if version else {})},
                            {**info, "index": 1, "node": "n1", "version": __version__}])
    assert list(launcher.members) == [1] and list(bad) == [0], bad
    assert f"its agent on n0 {said}, the controller {__version__}: one clustercheck across the run" in bad[0], bad
    assert launcher.explain([0], bad) == {"index-0": bad[0]}  # named among the absent: INCOMPLETE


def test_the_agent_says_its_version_when_it_joins() -> None:
    """The agent's join carries the version the controller compares (run/agent.py)."""
    import inspect

    from clustercheck.run import agent

    assert '"version": __version__' in inspect.getsource(agent.Agent)
