"""A threshold directory (`--thresholds DIR`, $CLUSTERCHECK_THRESHOLDS) that cannot be read is one line naming
it, exit 4 (bad input): never a traceback and `internal error`, and never a search that went on without it
(a shipped profile of the same name would judge in its place)."""

from __future__ import annotations

import errno
from pathlib import Path

from clustercheck.cli import main
from clustercheck.judging.profiles import search_path

PROFILE = "platform: mine\ndescription: mine\ndetect: {gpu_count: 0}\nchecks: {}\n"


def test_a_thresholds_directory_that_cannot_be_listed_is_one_line_exit_4(tmp_path, monkeypatch, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "mine.yaml").write_text(PROFILE)
    real = Path.iterdir

    def iterdir(self: Path):  # tests run as root, where chmod 000 does not deny: the boundary is faked
        if self == mine:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    monkeypatch.delenv("CLUSTERCHECK_THRESHOLDS", raising=False)
    assert main(["platforms", "--thresholds", str(mine)]) == 4
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"clustercheck: error: {mine}: cannot list the threshold profiles in it: Permission denied"], err

    monkeypatch.setenv("CLUSTERCHECK_THRESHOLDS", str(mine))
    assert main(["platforms"]) == 4
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"clustercheck: error: {mine}: cannot list the threshold profiles in it: Permission denied"], err


def test_a_listable_directory_still_gives_its_profiles(tmp_path):
    (tmp_path / "mine.yaml").write_text(PROFILE)
    assert search_path([tmp_path], environ={}).files()["mine"] == tmp_path / "mine.yaml"


def test_a_fifo_in_a_thresholds_directory_is_refused_not_waited_on(tmp_path, monkeypatch, capsys):
    """`platforms --thresholds DIR` with a FIFO named x.yaml in DIR waited for a writer for ever. The run is
    guarded here by a thread: were it to block again, the test opens the FIFO's writing end to let it go,
    and fails, rather than hanging the suite."""
    import os
    import threading

    mine = tmp_path / "mine"
    mine.mkdir()
    fifo = mine / "x.yaml"
    os.mkfifo(fifo)
    monkeypatch.delenv("CLUSTERCHECK_THRESHOLDS", raising=False)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["platforms", "--thresholds", str(mine)])),
                              daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # blocked opening it: a writer lets the read end, and so the thread, go
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(30)
        raise AssertionError("platforms waited on a FIFO named x.yaml in --thresholds")
    assert codes == [4]
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"clustercheck: error: {fifo}: is a FIFO, not a regular file of YAML text"], err
