"""The measure kinds a suite may name: one module per kind (its parameters, memory need, reduction, judge,
figure and `Kind` entry), and here the registry that finds them.

Built-in kinds register when this package is imported; third-party ones come from the `clustercheck.kinds`
entry-point group (an entry point names a `Kind`, a sequence of them, or a function returning either) the
first time the registry is read, or from `register(...)` in a plugin or conftest. A registration is
checked as pluggy checks a hook implementation: its scopes must be scopes, its units units, its runner an
importable `module:function`, its `expect_keys` expect: keys, and replacing a kind that exists needs
`replace=True`. A bad one raises `UserError` with one line naming the kind and what is wrong. A kind whose
judge reads expectations (`Rules.expect`) declares them in `expect_keys`: `run --expect KEY` refuses a key no
selected check declares. A kind's `parse` reads its check's `params:` through `Fields.get`; a key it did not
get is refused after it returns (suite/load.py calls `done()`, whether or not parse did), so a misspelt param
is one line naming file, line and key, never dropped unread."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

from clustercheck.errors import UserError
from clustercheck.kinds.base import Kind
from clustercheck.kinds.base import SCOPES
from clustercheck.units import UNITS

ENTRY_POINTS = "clustercheck.kinds"
FIGURES = ("sweep", "matrix", "bars", "none")
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_RUNNER = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_]\w*)")


class Registry(Mapping[str, Kind]):
    """name -> Kind. Reading it loads the entry-point kinds once (a plugin installed is a plugin used)."""

    def __init__(self) -> None:
        self._kinds: dict[str, Kind] = {}
        self._loaded = False

    def _load(self) -> dict[str, Kind]:
        if not self._loaded:
            self._loaded = True
            for ep in metadata.entry_points(group=ENTRY_POINTS):
                _from_entry_point(ep)
        return self._kinds

    def __getitem__(self, name: str) -> Kind:
        return self._load()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def add(self, kind: Kind, replace: bool) -> None:
        if kind.name in self._kinds and not replace:
            raise UserError(f"measure kind {kind.name!r}: already registered ({self._kinds[kind.name].runner}); "
                            f"pass replace=True to replace it")
        self._kinds[kind.name] = kind


KINDS = Registry()


def register(kind: Kind | None = None, /, *, replace: bool = False, **fields: Any) -> Kind:
    """Add a measure kind: `register(name=..., scopes=(...), metrics={...}, parse=..., description=...,
    runner="module:function", judge=...)` (the other `Kind` fields are optional), or `register(Kind(...))`.
    Suites may name it from now on. UserError, one line, for a registration that cannot work."""
    if kind is None:
        try:
            kind = Kind(**fields)
        except TypeError as exc:  # a missing or unknown field
            raise UserError(f"measure kind {fields.get('name', '?')!r}: {exc}".replace("Kind.__init__() ", "")) from None
    elif fields:
        raise UserError(f"measure kind {kind.name!r}: give a Kind or keyword fields, not both")
    problem = _problem(kind)
    if problem:
        raise UserError(f"measure kind {kind.name!r}: {problem}")
    KINDS.add(kind, replace)
    return kind


def _problem(kind: Kind) -> str | None:
    if not isinstance(kind.name, str) or not _NAME.fullmatch(kind.name):
        return "the name must be 1-64 lower-case letters, digits and '_', starting with a letter"
    if not kind.scopes or isinstance(kind.scopes, str) or any(s not in SCOPES for s in kind.scopes):
        return f"scopes {kind.scopes!r}: each must be one of {', '.join(SCOPES)}"
    bad = [f"{m}: {u!r}" for m, u in dict(kind.metrics).items() if u not in UNITS]
    if bad:
        return f"metric unit {bad[0]} is not a unit (known: {', '.join(UNITS)})"
    for metric, span in dict(kind.domains).items():
        if metric not in kind.metrics or not (isinstance(span, tuple) and len(span) == 2 and span[0] < span[1]):
            return f"domain {metric}: {span!r}: expected (lowest, highest) of a metric the kind reports"
    for name in ("parse", "judge", "check_group", "task_params"):
        if not callable(getattr(kind, name)):
            return f"{name} must be callable"
    if kind.memory is not None and not callable(kind.memory):
        return "memory must be callable or None"
    if kind.figure not in FIGURES:
        return f"figure {kind.figure!r}: one of {', '.join(FIGURES)}"
    bad_key = _expect_key_problem(kind)
    if bad_key:
        return bad_key
    return _runner_problem(kind.runner)


def _expect_key_problem(kind: Kind) -> str | None:
    """expect_keys name keys an expect: block takes (`topology.gpu_nic` for a nested one): `run --expect` refuses
    a key no selected check declares, so a name no one can type would only hide what the judge reads."""
    from clustercheck.judging.expect import EXPECT_KEYS, TOPOLOGY_KEYS

    if isinstance(kind.expect_keys, str) or not isinstance(kind.expect_keys, tuple):
        return f"expect_keys {kind.expect_keys!r}: expected a tuple of expect: keys"
    for key in kind.expect_keys:
        top, _, sub = key.partition(".") if isinstance(key, str) else ("", "", "")
        if top not in EXPECT_KEYS or sub and (top != "topology" or sub not in TOPOLOGY_KEYS):
            return f"expect_keys: {key!r} is no expect: key (known: {', '.join(EXPECT_KEYS)})"
    if kind.expect_keys_of is not None and not callable(kind.expect_keys_of):
        return "expect_keys_of must be callable or None"
    return None


def _runner_problem(runner: object) -> str | None:
    """The runner names a module the ranks can import and a function it defines at its top level. The
    module's file is found, and read, without importing it or its packages: a rank-side module imports
    torch, which the controller never needs."""
    m = _RUNNER.fullmatch(runner) if isinstance(runner, str) else None
    if m is None:
        return f"runner {runner!r}: expected 'module:function'"
    module, function = m.groups()
    source = _module_file(module)
    if source is None:
        return f"runner {runner}: no module {module!r} on this Python's path (the ranks import it too)"
    if source.suffix != ".py":
        return None  # an extension module: found, but its names cannot be read without importing it
    defined = _top_level_names(source)
    if isinstance(defined, str):
        return f"runner {runner}: {source} cannot be read: {defined}"
    if function not in defined:
        return f"runner {runner}: {module} defines no {function!r} at its top level"
    return None


@functools.lru_cache(maxsize=64)
def _top_level_names(source: Path) -> frozenset[str] | str:
    """The names a module's source defines or imports at its top level (once per file: the seven
    collectives share one runner module); the exception's name when the file cannot be read."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError) as exc:
        return type(exc).__name__
    return frozenset({n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)} | {
        a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names})


def _module_file(module: str) -> Path | None:
    """The file `module` would be imported from, found on the path without running any package's
    __init__ (importlib.util.find_spec imports the parents of a dotted name)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None and not spec.submodule_search_locations:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin else None
    for directory in spec.submodule_search_locations or ():
        base = Path(directory).joinpath(*rest[:-1])
        for candidate in (base / f"{rest[-1]}.py", base / rest[-1] / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def _from_entry_point(ep: metadata.EntryPoint) -> None:
    where = f"entry point {ENTRY_POINTS}: {ep.name} = {ep.value}"
    try:
        found = ep.load()
        if callable(found) and not isinstance(found, Kind):
            found = found()
    except Exception as exc:  # a broken plugin is the user's to fix: one line, not a traceback
        raise UserError(f"{where}: could not be loaded: {type(exc).__name__}: {exc}") from None
    kinds = [found] if isinstance(found, Kind) else list(found) if isinstance(found, (list, tuple)) else None
    if kinds is None or not all(isinstance(k, Kind) for k in kinds):
        raise UserError(f"{where}: gives {type(found).__name__}, not a Kind or a list of them")
    for kind in kinds:
        try:
            register(kind)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None


def figure_of(r: Mapping[str, Any]) -> str:
    """What to draw for a record entry (older records carry no `figure`)."""
    kind = KINDS.get(r.get("measure") or "")
    return r.get("figure") or (kind.figure if kind else "bars")


def _builtins() -> None:
    from clustercheck.kinds import (burn, collectives, device_memory, gdsio, gemm, host_device, host_memory,
                                    ib_write_bw, nccl_tests, nvbandwidth, p2p, probe)

    for module in (collectives, host_device, device_memory, host_memory, gemm, p2p, probe, nccl_tests, nvbandwidth,
                   burn, ib_write_bw, gdsio):
        for kind in module.PROVIDES:
            register(kind)


_builtins()
