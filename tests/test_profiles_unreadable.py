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
