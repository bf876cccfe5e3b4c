"""`measure: probe`: a system probe (`clustercheck probe --list`) run on each node's first rank and judged
against the profile's `expect:` block, overridden per check by `params: {expect: ...}`. Its verdicts are
expectations, not limits. Ranks: clustercheck.measure:probe."""

from __future__ import annotations

from typing import Any, Mapping

from clustercheck.errors import HarnessError, Skip, show
from clustercheck.judging.expect import TOPOLOGY_KEYS, check_expect, merged, typed_keys
from clustercheck.judging.measurement import Measurement
from clustercheck.judging.unjudged import notes_or_error
from clustercheck.judging.verdicts import Expectation, Verdict
from clustercheck.kinds.base import Answers, Kind, Rules
from clustercheck.probes import NAMES
from clustercheck.schema import Fields, one_of
from clustercheck.kinds.base import CheckSpec


def parse(f: Fields) -> dict[str, Any]:
    name = f.get("probe", str, check=one_of(*NAMES))
    raw = f.get("expect", dict, {})
    expect = check_expect(raw, f.file, f.key_path("expect"), f.line_of("expect"))
    _refuse_unread(name, expect, Fields(raw, f.file, f.key_path("expect"), f.line_of("expect")))
    f.done()
    return {"probe": name, "expect": expect}


def _refuse_unread(name: str, expect: Mapping[str, Any], where: Fields) -> None:
    """A key of the check's own expect: that its probe never reads is refused, as `clustercheck probe NAME
    --expect KEY=...` refuses it (probes/cli.py, by the same Probe.reads): run, nothing would judge it and the
    check would pass, the expectation taken for checked."""
    from clustercheck.probes import get

    probe = get(name)
    for key in typed_keys(expect):
        if not probe.reads(key):
            reads = f"it reads: {', '.join(probe.expect_keys)}" if probe.expect_keys else "it reads none"
            top, _, sub = key.partition(".")  # topology.gpu_nic: named at its own line
            at = Fields(where.data[top], where.file, where.key_path(top), where.line_of(top)) if sub else where
            raise at.error(sub or top, f"probe {probe.name} does not read it ({reads})")


def task(check: CheckSpec, expect: Mapping[str, Any]) -> dict[str, Any]:
    # the check's own over the run's, `topology` key by key: its gpu_nic keeps the profile's gpu_gpu
    return {"probe": check.params["probe"], "expect": merged(expect, check.params["expect"])}


def reads(check: CheckSpec) -> tuple[str, ...]:
    """Its probe's expect_keys, less those the check's own `params: {expect: ...}` sets: task() puts the check's
    over the run's, so a run's --expect of such a key (`topology.gpu_nic` where it sets its own) reaches no
    judge; the `topology` keys it does not set still do."""
    from clustercheck.probes import get

    own = set(typed_keys(check.params["expect"]))
    out: list[str] = []
    for k in get(check.params["probe"]).expect_keys:
        if k in own:
            continue
        if k == "topology" and any(o.startswith("topology.") for o in own):  # the nested keys it leaves the run
            out += [f"topology.{n}" for n in TOPOLOGY_KEYS if f"topology.{n}" not in own]
        else:
            out.append(k)
    return tuple(out)


def judge(a: Answers, rules: Rules) -> tuple[Measurement, list[Verdict]]:
    """A probe's verdicts, from the node's first rank: expectations, not limits. What the probe could not
    judge is never recorded as a pass: when nothing failed, an item with such a verdict is an error,
    `not judged: ...` when it judged nothing at all (no expectation given, nothing in the output to judge),
    or naming what went unjudged when it judged only a part. Only a probe that raised ProbeSkip on the rank
    (the tool or hardware it needs is absent there: outcome `skipped`) is a skip, with its reason."""
    result, name = answered(a), a.check.params["probe"]
    if result["outcome"] == "skipped":
        raise Skip(result["reason"])
    if result["outcome"] == "error":
        raise HarnessError(f"probe {name} on {result['host']}: {result['reason']}")
    judged = [v for v in result["verdicts"] if v.get("judged", True)]
    unjudged = [f"{v['subject']}: {v['what']}: {v['detail']}" for v in result["verdicts"] if not v.get("judged", True)]
    said = "; ".join(unjudged[:3]) + (f"; and {len(unjudged) - 3} more" if len(unjudged) > 3 else "")
    # a failure stands; what the probe could not judge beside it is still said (the item's notes), never dropped;
    # alone, it is the item's error (judging/unjudged.py): a gap in what it was given or read, never a skip
    notes = notes_or_error((v["passed"] for v in judged), [f"probe {name} could not judge all it read: {u}"
                                                           for u in unjudged],
                           f"not judged: probe {name} on {result['host']} judged nothing: {said}" if not judged else
                           f"probe {name} on {result['host']} could not judge all it read: {said}")
    verdicts = [Verdict(v["what"], v["measured"], "",
                        Expectation(a.check.id, v["what"], v["expected"] or "-", rules.expect_origin, v["detail"]),
                        v["passed"], subject=v["subject"], detail=v["detail"])
                for v in judged]
    worst = next((v.subject for v in verdicts if not v.passed), None)
    return Measurement(metrics={}, units={}, worst=worst, notes=notes), verdicts


OUTCOMES = ("passed", "failed", "not judged")  # with verdicts; `skipped` and `error` with a reason (ProbeOutcome)
VERDICT_KEYS = ("subject", "what", "detail", "measured", "expected")


def answered(a: Answers) -> dict[str, Any]:
    """The node's first rank's outcome, as measure.probe writes it; else a HarnessError naming the probe and
    the node. A `passed` of 'false' (a string: truthy) passed, an empty verdict list passed (nothing failed),
    and no outcome at all was a StopIteration: none of them is a probe that judged the node."""
    name = a.check.params["probe"]
    result = next((r for r in a.per_rank if isinstance(r, dict) and "outcome" in r), None)
    if result is None:
        raise HarnessError(f"probe {name} on {', '.join(sorted(set(a.hosts))) or 'no host'}: no rank answered the "
                           f"probe's outcome: not judged")
    where = f"probe {name} on {result.get('host') if isinstance(result.get('host'), str) else '?'}"
    if result["outcome"] in ("skipped", "error"):
        if not isinstance(result.get("reason"), str) or not isinstance(result.get("host"), str):
            raise HarnessError(f"{where}: {result['outcome']} without a reason ({show(result.get('reason'), 40)})")
        return result
    if result["outcome"] not in OUTCOMES or not isinstance(result.get("host"), str):
        raise HarnessError(f"{where}: answered outcome {show(result['outcome'], 40)}, which no probe gives: not judged")
    verdicts = result.get("verdicts")
    if not isinstance(verdicts, list) or not verdicts:
        raise HarnessError(f"{where}: answered {result['outcome']} with no verdict ({show(verdicts, 40)}): not judged")
    for v in verdicts:
        if not isinstance(v, dict) or not all(k in v for k in VERDICT_KEYS):
            raise HarnessError(f"{where}: a verdict without {', '.join(VERDICT_KEYS)} ({show(v, 60)}): not judged")
        for key in ("passed", "judged"):  # 'false' is truthy: a pass
            if not isinstance(v.get(key, True), bool):
                raise HarnessError(f"{where}: {v['subject']} {v['what']}: {key} is {show(v.get(key), 40)}, not true "
                                   f"or false: not judged")
    return result


PROVIDES = (Kind("probe", ("node",), {}, parse,
                 "a system probe (clustercheck probe --list) judged against the platform's expect: block, "
                 "run on each node's first rank", "clustercheck.measure:probe", judge, limited=False,
                 figure="none", task_params=task, skips_on_answers=True, expect_keys_of=reads),)
