"""Suite files (`suites/*.yaml`) -> frozen CheckSpecs that remember their file and line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Iterable, Sequence

from clustercheck import yamlfile
from clustercheck.kinds import KINDS
from clustercheck.suite import envpolicy
from clustercheck.kinds.base import SCOPES, CheckSpec
from clustercheck.errors import UserError, show
from clustercheck.schema import Fields, between, one_of
from clustercheck.units import is_number
from clustercheck.yamlfile import Mapping

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")  # check ids; documented in docs/security.md
DEFAULT_TIMEOUT = 300.0


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    file: str
    checks: tuple[CheckSpec, ...]


def load_suite(path: Path, display: str | None = None) -> Suite:
    name = display or str(path)
    doc = yamlfile.load(path, name)
    top = Fields(doc, name, "")
    suite_name = top.get("suite", str, path.stem)
    description = top.get("description", str, "")
    defaults = Fields(top.get("defaults", dict, {}), name, "defaults", top.line_of("defaults"))
    default_timeout = defaults.get("timeout", float, DEFAULT_TIMEOUT, check=between(1, 86_400))
    default_env = _env(defaults, ())
    default_min_nodes = defaults.get("min_nodes", int, 1, check=between(1, 100_000))
    defaults.done()
    raw_checks = top.get("checks", list)
    top.done()
    if not raw_checks:
        raise top.error("checks", "a suite needs at least one check")
    checks: list[CheckSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_checks):
        f = Fields(raw, name, f"checks[{index}]", top.line_of("checks"))
        check_id = f.get("id", str, check=_valid_id)
        if check_id in seen:
            raise f.error("id", f"duplicate check id {show(check_id)} (first at line {seen[check_id]})")
        seen[check_id] = f.line
        measure = f.get("measure", str, check=one_of(*KINDS))
        kind = KINDS[measure]
        scope = f.get("scope", str, kind.scopes[0], check=one_of(*SCOPES))
        if scope not in kind.scopes:
            raise f.error("scope", f"{measure} supports scope {', '.join(kind.scopes)}, not {scope!r}")
        timeout = f.get("timeout", float, default_timeout, check=between(1, 86_400))
        env = _env(f, default_env)
        params_f = Fields(f.get("params", dict, {}), name, f.key_path("params"), f.line_of("params"))
        params = kind.parse(params_f)
        params_f.done()  # a plugin kind's parse need not: a misspelt param is refused, never dropped unread
        if kind.fits is not None and (misfit := kind.fits(params, timeout)) is not None:
            key, why = misfit  # a time that cannot fit could only end as 'a rank hung', after the whole timeout
            given = f"line {f.line_of('timeout')}" if "timeout" in f.data else \
                f"defaults.timeout, line {defaults.line_of('timeout')}" if "timeout" in defaults.data else "the default"
            raise params_f.error(key, f"{why} ({given}); raise timeout")
        limits = f.get("limits", str, "", check=_valid_id)
        if limits and not kind.limited:
            raise f.error("limits", f"{measure} is judged against the profile's expect: block, not by limits")
        min_nodes = f.get("min_nodes", int, default_min_nodes, check=between(1, 100_000))
        checks.append(CheckSpec(check_id, measure, scope, params, env, timeout,
                                f.get("description", str, ""), name, f.line, limits, f.line_of("limits"), min_nodes))
        f.done()
    return Suite(suite_name, description, name, tuple(checks))


def one_stem_each(suites: Sequence[tuple[str, Path, Iterable[str]]]) -> None:
    """Refuse two different files (by resolve()) of one stem in a run: `suites` is (name as shown, file, check
    ids) per suite. An item is `<stem>::<check id>[<where>]` (record/schema.item_id), so a shared id makes two
    results one item's (JUnit's duplicate testcases, a record `compare` refuses); and compare knows a suite by
    its stem alone (`Run.suites`, `Baseline.missing`): with no id shared either, a later run of one of the files
    would read the other's items as passed in the baseline and never measured now."""
    first: dict[str, tuple[str, Path, set[str]]] = {}
    for shown_as, path, ids in suites:
        stem, real = PurePath(shown_as).stem, path.resolve()
        if stem not in first:
            first[stem] = (shown_as, real, set(ids))
            continue
        other, other_real, other_ids = first[stem]
        if real == other_real:  # the same file named twice is one suite
            continue
        shared = sorted(other_ids & set(ids))
        both = f"suite files {other} and {shown_as} are both named {stem!r}"
        raise UserError(f"{both} and both have check {shared[0]!r}: its items would be one item ({stem}::{shared[0]}), "
                        f"reported twice and refused by compare; rename one file" if shared else
                        f"{both}: reports and compare know a suite by its file's stem ({stem}::<check id>), so "
                        f"their items would read as one suite's; rename one file")


def _valid_id(value: str) -> str | None:
    # Ids become pytest node ids, file names in reports and text on terminals: no control bytes,
    # no '::' or '[' (pytest's separators), nothing a shell or HTML would read differently.
    if not ID.fullmatch(value):
        return (f"{show(value)} is not a check id: 1-100 characters of letters, digits, '.', '_' and '-', "
                f"starting with a letter or digit")
    return None


def _env(f: Fields, inherited: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    raw = f.get("env", dict, None)
    if raw is None:
        return inherited
    entries = Fields(raw, f.file, f.key_path("env"), f.line_of("env"))
    # The value as written, not as YAML 1.1 reads it: `010` is 8 to PyYAML, `0x16` 22, `1:30` 90 (base 60) and
    # `yes` True, while the rank's variable must hold the text the suite shows.
    texts = raw.texts if isinstance(raw, Mapping) else {}
    env = dict(inherited)
    for key, value in raw.items():
        problem = envpolicy.name_problem(key)
        if problem:
            raise entries.error(key, f"{show(key)} {problem}")
        if value is None:
            raise entries.error(key, "no value (null); give one (\"\" for an empty variable) or leave the key out")
        if isinstance(value, (dict, list)) or isinstance(value, int) and value.bit_length() > 64:  # no int64 either
            raise entries.error(key, f"expected text or a number, got {show(value)}")
        text = texts[key] if key in texts else value if isinstance(value, str) else None
        if text and "_" in text and is_number(value):
            # YAML's digit separators: 4_194_304 is 4194304 to YAML, 4 to NCCL's strtoll; neither reading is safe
            raise entries.error(key, f"{show(text)} is a number with '_' in it, which a program reads only up to "
                                     f"the '_'; write it without, or quote it to pass the text")
        if text is None:  # not from the YAML loader: a plain scalar's str(), never a list or a mapping's
            if not is_number(value):
                raise entries.error(key, f"expected text or a number, got {show(value)}")
            text = str(value)
        problem = envpolicy.value_problem(text)
        if problem:
            raise entries.error(key, f"{problem}: {show(text)}")
        env[key] = text
    return tuple(sorted(env.items()))


YAML_SUFFIXES = (".yaml", ".yml")
_CHECKS_LINE = re.compile(r"^checks\s*:", re.MULTILINE)


def is_yaml_name(path: Path) -> bool:
    """A file named like YAML: `.yaml` or `.yml`, in any case (`SUITE.YAML` is as much a suite as `suite.yaml`)."""
    return path.suffix.lower() in YAML_SUFFIXES


def found_suite(path: Path) -> bool:
    """Whether clustercheck's collection takes a file nobody named on the command line: a YAML suite file
    (`is_suite_file`) in a directory named `suites` (plugin.pytest_collect_file; run/pytestconfig.py looks
    for one by the same rule)."""
    return is_yaml_name(path) and path.parent.name == "suites" and is_suite_file(path)


def is_suite_file(path: Path) -> bool:
    """A YAML file is a suite when it has a top-level `checks:` key (cheap pre-check for collection): a block
    line `checks:` after an optional UTF-8 BOM, or else, in a file that names `checks` at all (flow style,
    `{checks: [...]}`), a parsed top-level mapping with that key."""
    try:
        text = yamlfile.read_text(path, str(path)).removeprefix("\ufeff")  # a FIFO named x.yaml: never waited on
    except yamlfile.TooLarge:
        return True  # taken, so that load_suite says why it is refused: never left out in silence
    except UserError:  # no regular file, unreadable, not UTF-8: no suite; named explicitly, load_suite says why
        return False
    if _CHECKS_LINE.search(text):
        return True
    if "checks" not in text:
        return False
    try:
        doc = yamlfile.loads(text, str(path))
    except Exception:  # noqa: BLE001 - not YAML at all: not a suite; named explicitly, load_suite says why
        return False
    return isinstance(doc, dict) and "checks" in doc


