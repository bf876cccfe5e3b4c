"""A node's name as an agent gives it (NODE_NAME, --node) follows --hosts' rule (gang.node_name_problem):
it is printed, names a log file and is passed to scontrol. The agent refuses a bad one before it joins
(exit 4, one line); the controller refuses a join naming one (an agent of another version): that index
never joined, with the reason, and the run is INCOMPLETE. --drain never passes a node named ALL (Slurm's
word for every node) to scontrol."""

from __future__ import annotations

import pytest

from clustercheck import __version__
from clustercheck.errors import UserError
from clustercheck.record import exclude
from clustercheck.run import gang, wire
from clustercheck.run.join import JoinLauncher

HOSTILE = "n2\x1b]52;c;cHduZWQ=\x07\x1b[1A\x1b[2K"
BAD = [HOSTILE, "n 2", "n2,n3", "n[2-3]", "-n2", "NodeName=n2", "n2\tx", "x" * 254, ""]


@pytest.mark.parametrize("name", BAD)
def test_the_agent_refuses_a_node_name_that_is_no_host_name(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gang.NODE_ENV, name)
    with pytest.raises(UserError) as err:
        gang.identity("0", None, "127.0.0.1:29410", name or "-bad")  # "": the hostname stands in
    said = str(err.value)
    assert "NODE_NAME" in said and "is no host name" in said and "\x1b" not in said and "\n" not in said, said


@pytest.mark.parametrize("name", ["n2", "gpu-node-017.cluster.local", "N2", "fe80::1", "a@b", "x" * 253])
def test_a_host_name_is_a_node_name(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gang.NODE_ENV, name)
    assert gang.identity("0", None, "127.0.0.1:29410", "host").node == name


def test_the_controller_refuses_a_join_naming_a_bad_node() -> None:
    """An agent that skipped the check posts a sealed join naming HOSTILE: not a member, its index's reason
    names it escaped; index 1's good join is taken."""
    import torch.distributed as dist

    launcher = JoinLauncher(2, "127.0.0.1:29411", token="t" * 64, gather=False)
    launcher.store = dist.HashStore()
    for index, node in ((0, HOSTILE), (1, "n1")):
        nonce = "ab" * (gang.NONCE // 2)
        key = gang.agent_key(launcher.token, launcher.nonce, nonce)
        info = {"index": index, "node": node, "local_ranks": None, "host": "pod", "pid": 1, "version": __version__}
        launcher.store.set(gang.join_key(index), nonce + wire.seal(key, info))
    bad = launcher._read_joins()
    assert list(launcher.members) == [1] and launcher.members[1].node == "n1"
    assert list(bad) == [0] and "a join for index 0 named node" in bad[0] and "is no host name" in bad[0], bad
    assert "\x1b" not in bad[0] and "\\x1b]52" in bad[0], bad
    absent = launcher.explain([0], bad)
    assert absent == {"index-0": bad[0]}  # named among the absent: the run is INCOMPLETE


@pytest.mark.parametrize("name", ["ALL", "all", "All"])
def test_drain_never_asks_scontrol_to_drain_all(name: str) -> None:
    for dry_run in (True, False):  # never run: scontrol is not called for it, even to look
        [entry] = exclude.drain({name: "nic rate 1 < 2 Gb/s"}, dry_run=dry_run)
        assert entry["rc"] is None and "refused" in entry["output"] and "every node" in entry["output"], entry
