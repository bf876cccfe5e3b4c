"""Judge a recorded run again, from its raw per-rank measurements: each item's answers are rebuilt from its
result line (record/rebuild.py), reduced and judged by the item's own kind (the same `judge` the run ran:
nccl-tests byte counts and bus factors, medians, worst subjects, built-in limits) against the limits of the
recorded threshold profile, read from the copy kept with the run (record/inputs.py) whose sha256 the
record's header names. How an item is judged (its measure and scope) is its check's in the kept suite,
never what its own line says. Every metric, derived row value and verdict the record holds must come out
the same; each one that does not is a problem, one line naming the record line. Each item's outcome must be
the one its verdicts give (an error item that holds a measurement is judged again and refused), and the
plan must hold the suites' checks (evidence/plan_check.py), the header its profile, pools and argv (header_check.py).

Judged as recorded, and listed as such: verdicts that no kind's judge makes (`--counters` windows and
`--compare` baselines, whose inputs are not part of the run's evidence), `scope: localize` items (the
planner's rounds), the node-layout items (`gpu-count`) and an item a failed `--counters` window failed
while its own measurement errored or was skipped."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from clustercheck.errors import ClusterCheckError, UserError
from clustercheck.evidence.header_check import header_problems
from clustercheck.evidence.plan_check import LAYOUT, held, is_layout, outcome_problems, plan_problems, selection
from clustercheck.record import inputs
from clustercheck.record.io import Record
from clustercheck.record.rebuild import NotKept, answers, hosts, keeps_answers
from clustercheck.record.schema import ResultEntry, item_id

ROW_LINES = 3  # row values named one by one per item; the rest counted
REL_TOL = 1e-9  # the record keeps microseconds as floats: a re-derived value differs only in the last bits


@dataclass
class Rejudged:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    results: int = 0  # result lines judged again
    metrics: int = 0
    verdicts: int = 0
    profile: str = ""  # the kept copy the verdicts were judged against
    # how the run selected its items (its command line's `-k fine`, else the plan's recorded selection), the
    # checks of the suites it planned items of, and the checks the suites hold; None for a run of the whole suites
    selection: tuple[str, int, int] | None = None


def same(a: Any, b: Any) -> bool:
    """Equal as recorded: numbers within REL_TOL (NaN equals NaN), lists and objects element by element
    (a row's per-rank times), anything else exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def field_problems(recorded: Mapping[str, Any], derived: Mapping[str, Any]) -> list[str]:
    """How a recorded entry (a verdict, a row) differs from the one re-derived, field by field: one that
    differs, one missing from the record (a record that says less than its evidence, a verdict without its
    source or worst rank, a row without its #wrong, is no record of what was judged) and one the
    re-derivation does not make. Empty when they are the same."""
    differ = [k for k in derived if k in recorded and not same(recorded[k], derived[k])]
    missing = [k for k in derived if k not in recorded]
    extra = [k for k in recorded if k not in derived]
    return ([f"differs in {', '.join(differ)}"] if differ else []) + \
        ([f"missing from the record: {', '.join(missing)}"] if missing else []) + \
        ([f"not re-derived: {', '.join(str(k)[:40] for k in extra)}"] if extra else [])


def _show(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else repr(v) if isinstance(v, str) else str(v)


def rejudge(run_dir: Path, rec: Record) -> Rejudged:
    out = Rejudged()
    name = rec.path.name
    header = rec.header
    try:
        kept = inputs.index(run_dir)
    except OSError as exc:  # a kept input that cannot be read: named, and nothing is judged against it
        culprit = Path(str(exc.filename))
        culprit_name = culprit.relative_to(run_dir).as_posix() if culprit.is_relative_to(run_dir) else str(culprit)
        out.problems.append(f"{culprit_name}: cannot be read ({exc.strerror or type(exc).__name__})")
        kept = {}
    profile, suites = _inputs(run_dir, header, kept, out)
    out.problems += header_problems(rec, profile)  # its platform, nodes and repetitions against the rest
    lines = rec.lines.results  # where load() found each result: the lines a reader splits at \n, as it does
    if len(lines) != len(rec.results):
        out.problems.append(f"{name}: {len(rec.results)} result(s) but {len(lines)} result line(s) placed: the "
                            f"record cannot be re-judged line by line")
        return out
    wheres = [f"{name}:{number}: {item_id(r)}" for number, r in zip(lines, rec.results, strict=True)]
    seen: dict[tuple[str, int], str] = {}
    for where, r in zip(wheres, rec.results, strict=True):
        key = (item_id(r), int(r.get("repeat") or 0))
        if key in seen:  # a passed line copied: one more pass than the run planned
            again = f" in repetition {key[1]}" if key[1] else ""
            out.problems.append(f"{where}: a second result for this item{again} (the first at "
                                f"{seen[key].split(': ', 1)[0]}): a run judges each item once")
        seen.setdefault(key, where)
        _one(where, r, header, profile, suites, out)
    out.problems += plan_problems(rec, suites, wheres, out.notes)
    # argv shows `-k`; PYTEST_ADDOPTS, addopts or a conftest leave it clean, and only the plan's selection says so:
    # without it a narrowed run verified as the whole suite
    chosen = selection(header.get("argv") or ())
    if not chosen and rec.selection:
        chosen = (f"a selection recorded in the plan ({rec.selection.get('selected')} of "
                  f"{rec.selection.get('collected')} items)")
    if chosen:
        checks = {(file, c.id) for file, suite in suites.items() for c in suite.checks}
        ran = {(str(i.get("suite_file")), str(i.get("check"))) for i in (rec.plan or rec.results)} & checks
        out.selection = (chosen, len(ran), len(checks))
    return out


def _inputs(run_dir: Path, header: Mapping[str, Any], kept: dict[str, Path], out: Rejudged
            ) -> tuple[Any, dict[str, Any]]:
    """The recorded profile and suites, loaded from their kept copies (each named by its original path, so
    that every limit's origin reads as it did in the run); a problem for each one missing."""
    from clustercheck.judging.thresholds import load_profile
    from clustercheck.suite.load import load_suite

    profile = None
    ref = header.get("thresholds") or {}
    copy = kept.get(str(ref.get("sha256") or ""))
    if copy is None:
        out.problems.append(f"{inputs.INPUTS}/: no copy of the threshold profile {ref.get('file')} with the record's "
                            f"sha256 {str(ref.get('sha256') or '')[:16] or '(none)'}: no verdict can be re-judged")
    else:
        try:
            profile = load_profile(copy, str(ref.get("file")))
            out.profile = copy.relative_to(run_dir).as_posix()
        except UserError as exc:
            out.problems.append(f"{copy.name}: the kept threshold profile cannot be read: {exc}")
    suites: dict[str, Any] = {}
    for s in header.get("suites") or ():
        copy = kept.get(str(s.get("sha256") or ""))
        if copy is None:
            out.problems.append(f"{inputs.INPUTS}/: no copy of the suite {s.get('file')} with the record's sha256 "
                                f"{str(s.get('sha256') or '')[:16] or '(none)'}: its items cannot be re-judged")
            continue
        try:
            suites[str(s.get("file"))] = load_suite(copy, str(s.get("file")))
        except UserError as exc:
            out.problems.append(f"{copy.name}: the kept suite cannot be read: {exc}")
    return profile, suites


def _one(where: str, r: ResultEntry, header: Any, profile: Any, suites: dict[str, Any], out: Rejudged) -> None:
    recorded: list[dict[str, Any]] = [dict(v) for v in r.get("verdicts") or []]
    out.problems += outcome_problems(where, r, recorded)
    if r.get("outcome") == "error" and not held(r):
        return  # nothing was judged, nothing to judge again
    if is_layout(r):  # the run's own item for a node short of GPUs: in no suite
        if (r.get("measure"), r.get("scope")) != LAYOUT[2:] + ("node",):
            out.problems.append(f"{where}: measure {r.get('measure')} scope {r.get('scope')}: the run writes its "
                                f"gpu-count item as measure layout, scope node")
        _as_recorded(where, "the run's layout of ranks", recorded, out, r)
        return
    suite = suites.get(r.get("suite_file") or "")
    check = next((c for c in suite.checks if c.id == r.get("check")), None) if suite else None
    if check is None:
        listed = any(s.get("file") == r.get("suite_file") for s in header.get("suites") or ())
        if suite is not None or not listed:  # a suite listed but not kept was named once already
            out.problems.append(f"{where}: check {r.get('check')!r} of {r.get('suite_file')} is not in the run's "
                                f"suite files: it cannot be re-judged")
        return
    if r.get("outcome") == "skipped":
        _skip(where, r, check, header, out)
        return
    # how an item is judged is its check's (the suite as run), never what its own line says
    if (r.get("measure"), r.get("scope")) != (check.measure, check.scope):
        out.problems.append(f"{where}: measure {r.get('measure')} scope {r.get('scope')}, but check {check.id!r} "
                            f"({check.where}) is measure {check.measure} scope {check.scope}: not what was run")
        return
    if check.scope == "localize":
        _as_recorded(where, "the localization planner", recorded, out, r)
        return
    if recorded and any(_unjudged(v) for v in recorded):  # --counters: a window failed while it errored or skipped
        _as_recorded(where, "--counters windows, its own measurement not judged", recorded, out, r)
        return
    if profile is None:
        return  # said once already
    if _norm(r.get("params")) != _norm(check.params):
        out.problems.append(f"{where}: its params differ from check {check.id!r} in the suite as run "
                            f"({check.where}): not what was measured")
        return
    _judge_again(where, r, check, header, profile, recorded, out)


def _skip(where: str, r: ResultEntry, check: Any, header: Any, out: Rejudged) -> None:
    """A skip must be the one the run's layout gives (run/applies.py, from the header), or one its kind's
    judge makes on what the ranks found, which the record does not keep: a measured item rewritten as
    skipped would otherwise read as a check that does not apply."""
    from clustercheck.errors import HarnessError, Skip
    from clustercheck.kinds import KINDS
    from clustercheck.run.applies import applies

    nodes, absent = header.get("nodes") or [], list(header.get("absent") or ())
    layout = (f"{len(nodes)} node(s) of {header.get('ranks_per_node')} rank(s) over {header.get('backend')}"
              + (f", {len(absent)} never joined" if absent else ""))
    try:
        applies(check, str(header.get("backend") or ""), len(nodes), int(header.get("ranks_per_node") or 0), absent)
    except Skip as exc:
        if r.get("message") != str(exc):
            out.problems.append(f"{where}: skipped saying {_show(r.get('message'))}, but on this run's layout "
                                f"({layout}) check {check.id!r} is skipped saying {str(exc)!r}")
        return
    except HarnessError as exc:
        out.problems.append(f"{where}: skipped, but on this run's layout ({layout}) the run makes it an error "
                            f"({exc})")
        return
    except ClusterCheckError as exc:
        out.problems.append(f"{where}: skipped, but check {check.id!r} cannot run on this run's layout ({layout}): "
                            f"{str(exc).splitlines()[0][:160]}")
        return
    if KINDS[check.measure].skips_on_answers:
        out.notes.append(f"{where}: skipped as recorded ({_show(r.get('message'))}): a {check.measure} item is "
                         f"skipped on what its node's ranks found, which the record does not keep")
    else:
        out.problems.append(f"{where}: skipped, but check {check.id!r} ({check.measure}) applies on this run's "
                            f"layout ({layout}) and its kind skips nothing on what the ranks find: a run of it "
                            f"measures it")


def _unjudged(v: Mapping[str, Any]) -> bool:
    """The verdict windows.despite makes for an item that judged nothing when a counter window failed."""
    return v.get("metric") == "measurement" and v.get("measured") == "not judged" and not v.get("passed")


def _as_recorded(where: str, by: str, recorded: list[dict[str, Any]], out: Rejudged, r: ResultEntry) -> None:
    if r.get("outcome") == "error":  # its measurement cannot be judged again to say whether it failed
        out.problems.append(f"{where}: outcome error, but it holds a measurement ({', '.join(held(r))}), judged "
                            f"only by {by}: a run writes none for an item it could not measure")
        return
    if not recorded:  # failed without a verdict: said by outcome_problems
        out.problems.append(f"{where}: judged by {by}, but it holds no verdict: nothing was judged")
        return
    out.notes.append(f"{where}: judged as recorded (by {by}, not from per-rank measurements)")
    _consistent(where, recorded, out)


def _judge_again(where: str, r: ResultEntry, check: Any, header: Any, profile: Any,
                 recorded: list[dict[str, Any]], out: Rejudged) -> None:
    from clustercheck.run.judge import fabric_of_header, rules_for
    from clustercheck.kinds import KINDS
    from clustercheck.kinds.base import Answers

    if "answers" in r and not keeps_answers(check.measure):  # rebuilt from the rows, never from what it says
        out.problems.append(f"{where}: carries answers, but {check.measure} items are re-judged from their rows (the "
                            f"byte counts from the suite's sizes and dtype): a run never writes them")
        return
    try:
        per_rank = answers(r, check, header)
        rules = rules_for(check, profile, fabric_of_header(header, profile))
        ranks = hosts(r, header, len(per_rank))
        m, verdicts = KINDS[check.measure].judge(Answers(check, per_rank, ranks, str(header.get("backend") or "gloo")),
                                                 rules)
    except NotKept as exc:
        out.problems.append(f"{where}: cannot be re-judged: {exc}")
        return
    except ClusterCheckError as exc:  # the kind's judge refuses the answers (a failed tool, no threshold)
        out.problems.append(f"{where}: re-judging its answers gives no verdicts ({str(exc).splitlines()[0][:160]})")
        return
    # StopIteration: a kind's judge looks for its first rank's answer with next(), and a hostile record's
    # `answers` (a string, a list of strings) holds none: one line, never a traceback
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, ZeroDivisionError, StopIteration) as exc:
        out.problems.append(f"{where}: its measurements cannot be judged ({type(exc).__name__}: {str(exc)[:80]}): "
                            f"not what a run writes")
        return
    if r.get("outcome") == "error":  # a failed item rewritten as a harness error keeps what it measured
        failed = [f"{v.metric} {_brief(v.as_dict())}" for v in verdicts if not v.passed]
        out.problems.append(f"{where}: outcome error, but it holds a measurement ({', '.join(held(r))}) whose "
                            f"verdicts, judged again, " + (f"fail ({'; '.join(failed[:3])}): a failed item rewritten "
                                                           f"as a harness error" if failed else
                                                           "pass: a run writes none for an item it could not measure"))
        return
    out.results += 1
    _metrics(where, r, m, out)
    _rows(where, r, m.rows, out)
    if not same(r.get("judged_at"), m.judged_at):  # one missing from the record is no size it was judged at either
        out.problems.append(f"{where}: judged_at {_show(r.get('judged_at'))} B, re-derived {_show(m.judged_at)} B")
    if r.get("worst") != m.worst:  # the subject the reports blame: another node's name there clears this one
        out.problems.append(f"{where}: worst {_show(r.get('worst'))}, re-derived {_show(m.worst)} from the ranks' "
                            f"measurements")
    _verdicts(where, recorded, [dict(v.as_dict()) for v in verdicts], out)


def _metrics(where: str, r: ResultEntry, m: Any, out: Rejudged) -> None:
    recorded = dict(r.get("metrics") or {})
    for metric, value in m.metrics.items():
        got = recorded.pop(metric, None)
        if got is None:
            out.problems.append(f"{where}: metric {metric} is missing from the record (re-derived {_show(value)} "
                                f"{m.units.get(metric, '')})")
        elif not same(got.get("value"), value) or got.get("unit") != m.units.get(metric):
            out.problems.append(f"{where}: metric {metric}: recorded {_show(got.get('value'))} {got.get('unit')}, "
                                f"re-derived {_show(value)} {m.units.get(metric)} from the ranks' measurements")
        else:
            out.metrics += 1
    for metric in recorded:
        out.problems.append(f"{where}: metric {metric} does not follow from the ranks' measurements (its kind "
                            f"reports no such metric for them)")


def _rows(where: str, r: ResultEntry, rows: Sequence[Mapping[str, Any]], out: Rejudged) -> None:
    """Every derived number of the per-size table (time, algbw, busbw, #wrong, slowest rank, spread)."""
    got = list(r.get("rows") or [])
    if len(got) != len(rows):
        out.problems.append(f"{where}: {len(got)} row(s) recorded, {len(rows)} re-derived")
        return
    found = []
    for i, (old, new) in enumerate(zip(got, rows)):
        label = f"size {new.get('size')} B {new.get('placement')}-place" if "size" in new else \
            f"{new.get('subject')} {new.get('metric')}"
        if not isinstance(old, Mapping):
            found.append(f"{where}: row {i + 1} ({label}): recorded {type(old).__name__}, not a row")
            continue
        for key, value in new.items():
            if key not in old:  # a row that says less than the measurements (its #wrong gone) is no record of them
                found.append(f"{where}: row {i + 1} ({label}): {key} is missing from the record (re-derived "
                             f"{_show(value)})")
            elif not same(old[key], value):
                found.append(f"{where}: row {i + 1} ({label}): {key} recorded {_show(old[key])}, "
                             f"re-derived {_show(value)}")
        found += [f"{where}: row {i + 1} ({label}): {str(key)[:40]} does not follow from the ranks' measurements "
                  f"(re-deriving the row makes no such value)" for key in old if key not in new]
    out.problems += found[:ROW_LINES]
    if len(found) > ROW_LINES:  # one forged column is one story, not a line per size
        out.problems.append(f"{where}: and {len(found) - ROW_LINES} more row value(s) that do not follow from the "
                            f"ranks' measurements")


def _key(v: Mapping[str, Any]) -> tuple[str, str]:
    return str(v.get("metric")), str(v.get("subject"))


def _verdicts(where: str, recorded: list[dict[str, Any]], rejudged: list[dict[str, Any]], out: Rejudged) -> None:
    left = list(recorded)
    for new in rejudged:
        old = next((v for v in left if _key(v) == _key(new)), None)
        who = f"verdict {new['metric']}" + (f" [{new['subject']}]" if new.get("subject") else "")
        if old is None:
            out.problems.append(f"{where}: {who} ({_brief(new)}) is missing from the record")
            continue
        left.remove(old)
        differ = field_problems(old, new)  # every field the judge writes, its worst rank and detail included
        if differ:
            out.problems.append(f"{where}: {who}: recorded {_brief(old)}, re-judged {_brief(new)} against "
                                f"{new.get('origin')} ({'; '.join(differ)})")
        else:
            out.verdicts += 1
    for old in left:  # not made by the kind's judge: --counters and --compare verdicts
        baseline = str(old.get("origin") or "").startswith("--compare ")
        if baseline or old.get("detail") is not None:
            out.notes.append(f"{where}: verdict {old.get('metric')} [{old.get('subject')}] judged as recorded "
                             f"({old.get('origin')}: its input is not part of the run's evidence)")
            if not baseline:  # a baseline verdict fails at exactly the tolerance, which its limit passes
                _consistent(where, [old], out)
        else:
            out.problems.append(f"{where}: verdict {old.get('metric')} ({_brief(old)}) does not follow from the "
                                f"ranks' measurements (re-judging makes no such verdict)")


def _brief(v: Mapping[str, Any]) -> str:
    state = "pass" if v.get("passed") else "FAIL"
    if v.get("kind") == "expect" or not v.get("op"):
        return f"{state} ({_show(v.get('measured'))}, expected {v.get('limit')})"
    return f"{state} ({_show(v.get('measured'))} {v.get('op')} {_show(v.get('limit'))} {v.get('unit') or ''})".rstrip()


def _consistent(where: str, verdicts: Sequence[Mapping[str, Any]], out: Rejudged) -> None:
    """A verdict judged as recorded must at least agree with its own number and limit."""
    from clustercheck.judging.limits import Limit

    for v in verdicts:
        if v.get("kind") == "expect" or not v.get("op") or not isinstance(v.get("measured"), (int, float)):
            continue
        try:
            limit = Limit("", str(v.get("metric")), str(v["op"]), float(v["limit"]), str(v.get("unit")), "", "", "")
            agrees = limit.passes(float(v["measured"])) == bool(v.get("passed"))
        except (KeyError, TypeError, ValueError):  # an operator or limit no run writes
            agrees = False
        if not agrees:
            out.problems.append(f"{where}: verdict {v.get('metric')}: {_brief(v)} contradicts its own limit")


def _norm(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))
