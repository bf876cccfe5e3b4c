"""The inputs of a run, kept with it: a copy of every suite file and of the threshold profile, exactly as
the run read them, in `RUN/inputs/`. The record's header names each by its original path and sha256; the
copies are what `clustercheck verify` re-judges with (a buyer has the run directory, not the seller's
files) and what the attestation lists as configuration. A derived profile (h100-sxm-4x) has no file: its
text, as derived, is kept instead."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from clustercheck.errors import UserError
from clustercheck.paths import shipped_path
from clustercheck.record.schema import SuiteRef

INPUTS = "inputs"
DERIVED = "derived:"


@dataclass(frozen=True)
class Kept:
    thresholds: SuiteRef
    suites: list[SuiteRef]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def profile_text(file: str, name: str) -> bytes | None:
    """The bytes of the profile a run was judged against: its file, or a derived profile's YAML."""
    if file.startswith(DERIVED):
        from clustercheck.judging.derive import derived_text, parse_name

        parsed = parse_name(name)
        if parsed is None:
            return None
        model, count, links = parsed
        text = derived_text(model.device_ids[0], count, links)
        return None if text is None else text.encode("utf-8")
    try:
        return Path(file).read_bytes()
    except OSError:
        return None


def _write(folder: Path, name: str, data: bytes) -> str:
    """Write `data` as folder/name (folder/2/name, ... when another input of that name is there already,
    since a profile's file name must stay its platform's name); the path relative to the run directory."""
    folder.mkdir(parents=True, exist_ok=True)
    target, n = folder / name, 1
    while target.exists() and target.read_bytes() != data:
        n += 1
        target = folder / str(n) / name
        target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
    return str(target.relative_to(folder.parent.parent).as_posix())


def keep(run_dir: Path, profile_file: str, profile_name: str, suite_files: Sequence[tuple[str, Path]]) -> Kept:
    """Copy the profile and suite files into RUN/inputs/ and return their references (the name the run
    shows, `suites/cpu-smoke.yaml` for a shipped one, and the sha256 of the bytes kept) for the record's
    header. `suite_files` pairs that name with the file read. A file that cannot be read is kept as missing
    (sha256 ""), which `verify` then names."""
    folder = run_dir / INPUTS
    data = profile_text(profile_file, profile_name)
    thresholds: SuiteRef = {"file": profile_file, "sha256": ""}
    if data is not None:
        _write(folder / "thresholds", f"{profile_name}.yaml", data)
        thresholds["sha256"] = _digest(data)
    suites: list[SuiteRef] = []
    for file, path in suite_files:
        try:
            text = path.read_bytes()
        except OSError:
            suites.append({"file": file, "sha256": ""})
            continue
        _write(folder / "suites", path.name, text)
        suites.append({"file": file, "sha256": _digest(text)})
    return Kept(thresholds, suites)


def index(run_dir: Path) -> dict[str, Path]:
    """sha256 -> the kept copy with those bytes, for every file under RUN/inputs/."""
    out: dict[str, Path] = {}
    folder = run_dir / INPUTS
    for path in sorted(folder.rglob("*")) if folder.is_dir() else ():
        if path.is_file() and not path.is_symlink():
            out.setdefault(_digest(path.read_bytes()), path)
    return out


def complete_for_signing(run_dir: Path, header: Mapping[str, object]) -> None:
    """A run recorded before inputs were kept: copy each input now, but only where its bytes still have the
    sha256 the record names (a suite edited since the run is not what ran). UserError naming the first
    input that cannot be kept."""
    have = index(run_dir)
    thresholds = header.get("thresholds")
    refs: list[tuple[str, Mapping[str, object]]] = []
    if isinstance(thresholds, Mapping):
        refs.append(("thresholds", thresholds))
    refs += [("suites", s) for s in header.get("suites") or () if isinstance(s, Mapping)]  # type: ignore[attr-defined]
    cwd = Path(str(header.get("cwd") or "."))  # the record names inputs as the run was given them
    for kind, ref in refs:
        file, digest = str(ref.get("file") or ""), str(ref.get("sha256") or "")
        if digest and digest in have:
            continue
        where = file if file.startswith(DERIVED) else str(cwd / file)
        name = str(header.get("platform") or "") if kind == "thresholds" else Path(file).stem
        data = profile_text(where, name) if kind == "thresholds" else _read(where)
        shipped = shipped_path(file)  # a shipped suite or profile, named as the run showed it
        if digest and shipped is not None and (data is None or _digest(data) != digest):
            data = _read(str(shipped))
        if not digest or data is None or _digest(data) != digest:
            why = "has no sha256 in the record" if not digest else "cannot be read" if data is None else \
                "has changed since the run (its sha256 differs from the record's)"
            raise UserError(f"{file}: the run's {'threshold profile' if kind == 'thresholds' else 'suite file'} "
                            f"{why}; cannot sign evidence of inputs that are not what ran")
        _write(run_dir / INPUTS / kind, f"{name}.yaml" if kind == "thresholds" else Path(file).name, data)


def _read(file: str) -> bytes | None:
    try:
        return Path(file).read_bytes()
    except OSError:
        return None
