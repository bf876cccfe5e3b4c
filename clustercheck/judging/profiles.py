"""Where threshold profiles (`*.yaml`, `*.yml`) are found: the user's directories first (`--thresholds DIR`, repeatable, then
`$CLUSTERCHECK_THRESHOLDS`, a `:`-separated list), then the profiles shipped in the package, then a
profile derived from the spec table for a known GPU model and count (clustercheck/derive.py). A profile
of the same name earlier in the path hides the later ones, so a user overrides a shipped profile by
writing one of that name, never by editing ours."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from clustercheck.errors import UserError
from clustercheck.paths import data_dir, display
from clustercheck.judging.thresholds import Profile, load_profile

ENV = "CLUSTERCHECK_THRESHOLDS"


@dataclass(frozen=True)
class SearchPath:
    dirs: tuple[Path, ...]      # in order of precedence
    shipped: Path               # the package's own, last of `dirs`

    def files(self) -> dict[str, Path]:
        """Profile name -> the file that wins for it. `.yml` counts as `.yaml` (suites take both; a profile
        left out would let the shipped one of its name judge instead), and one name in both is refused."""
        found: dict[str, Path] = {}
        for directory in self.dirs:
            here: dict[str, Path] = {}
            try:
                listed = sorted(p for p in directory.iterdir() if p.suffix.lower() in (".yaml", ".yml"))
            except OSError as exc:  # a directory we may not list: its profiles unseen, a shipped one would judge
                raise UserError(f"cannot list the threshold profiles in it: {exc.strerror or exc}",
                                file=display(directory)) from None
            for path in listed:
                if path.stem in here:  # mine.yaml beside mine.YML as much as beside mine.yml
                    raise UserError(f"a second threshold profile {path.stem!r} beside {here[path.stem].name}; "
                                    f"keep one of the two", file=display(path))
                here[path.stem] = path
            for stem, path in here.items():
                found.setdefault(stem, path)
        return found

    def profiles(self) -> list[Profile]:
        return [load_profile(path, display(path)) for path in self.files().values()]

    def tiers(self) -> dict[str, int]:
        """Profile name -> the position of its winning file's directory on the path (0: searched first)."""
        index = {d.resolve(): k for k, d in enumerate(self.dirs)}
        return {name: index.get(path.parent.resolve(), len(self.dirs)) for name, path in self.files().items()}

    def origin(self, path: Path) -> str:
        return "shipped" if path.parent.resolve() == self.shipped.resolve() else display(path.parent)

    def load(self, name: str) -> Profile:
        """A profile by name: a file on the path, else a derived profile of that name (h100-sxm-4x)."""
        path = self.files().get(name)
        if path is not None:
            return load_profile(path, display(path))
        from clustercheck.judging.derive import derived_by_name

        derived = derived_by_name(name)
        if derived is None:
            known = ", ".join(sorted(self.files())) or "none"
            raise UserError(f"no threshold profile {name!r} in {self.describe()} (known: {known}; or a derived "
                            f"name such as h100-sxm-4x, see clustercheck platforms)")
        return derived

    def describe(self) -> str:
        return ", ".join(display(d) for d in self.dirs)


def search_path(user: Sequence[Path] = (), environ: dict[str, str] | None = None) -> SearchPath:
    """The user's directories (from the command line, then the environment), then the shipped ones.
    A directory that does not exist is a mistake worth one line, not a silent miss."""
    env = (os.environ if environ is None else environ).get(ENV, "")
    given = [*user, *(Path(p) for p in env.split(os.pathsep) if p)]
    for directory in given:
        if not directory.is_dir():
            source = "--thresholds" if directory in user else f"${ENV}"
            raise UserError(f"{source} {directory}: no such directory of threshold profiles")
    shipped = data_dir("thresholds")
    dirs = tuple(dict.fromkeys([*given, shipped]))
    return SearchPath(dirs, shipped)


def as_search(where: SearchPath | Path) -> SearchPath:
    """A directory given alone (tests, --thresholds of older callers) is a path of that one directory."""
    return where if isinstance(where, SearchPath) else SearchPath((where,), where)
