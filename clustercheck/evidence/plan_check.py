"""What a record's items must agree with besides their numbers (evidence/rejudge.py judges those): each item's
outcome with its verdicts, and the run's plan with the suites as run (kept under inputs/).

- An item's outcome is the one its verdicts give: `failed` when one failed, `passed` when all passed. A
  `skipped` or `error` item judged nothing: it says why (its message) and carries no failed verdict. An
  `error` item that holds a measurement anyway (`held`: rows, metrics, a worst rank) is no harness error:
  evidence/rejudge.py judges it again and refuses it.
- Every check of the kept suites has a planned item (unless the plan says it is a selection, or, in a record
  without one, the argv selected items with -k, -m, --deselect or a node id, or its scope makes none on the run's nodes: `scope: pair` on one node),
  and where its scope places its items by the nodes alone (node, gpu, gpu-pair, cluster, localize) one for
  every place the run's own scopes.rounds gives over the run's nodes and those that never joined, matched by
  the item's node: a failed node's item deleted from the plan and the results is so named. (The pairs of
  `scope: pair` also follow --pair-strategy and --pair-seed, which addopts may give unseen: only its
  check's presence is required.) Every planned item is a check of those suites, with their measure and
  scope; every result is a planned item (or the run's own `gpu-count` layout item) and its nodes are the
  run's. A failed check deleted from both the plan and the results is so named."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from clustercheck.record.io import Record
from clustercheck.record.schema import ResultEntry, item_id, item_name

# the result a run writes itself for a node with fewer GPUs than the others (run/session.py): in no suite
LAYOUT = ("clustercheck", "gpu-count", "layout")
# pytest's options that run fewer items than the suites hold (`-k EXPR`, `-kEXPR`, `--deselect=ID`)
SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--sw", "--stepwise")
# the scopes whose items run/scopes.rounds places by the run's nodes alone (pair: also by its strategy and seed)
PLACED = ("node", "gpu", "gpu-pair", "cluster", "localize")


# what a measured item's line holds: a run writes none of it for an item that errored (plugin.py: no outcome)
MEASURED = ("rows", "metrics", "worst", "judged_at", "answers")


def held(r: Mapping[str, Any]) -> list[str]:
    """The measurement an item's line holds (its rows, metrics, worst rank...): none for an item that errored."""
    return [k for k in MEASURED if r.get(k) not in (None, "", [], {})]


def is_layout(r: Mapping[str, Any]) -> bool:
    return (r.get("suite_file"), r.get("check")) == LAYOUT[:2]


def outcome_problems(where: str, r: ResultEntry, recorded: Sequence[Mapping[str, Any]]) -> list[str]:
    """The item's outcome against its verdicts. A `passed` item without verdicts is left to re-judging
    (whose kind's judge would have made some, or none)."""
    outcome = r.get("outcome")
    failed = [v for v in recorded if not v.get("passed")]
    if outcome in ("skipped", "error"):
        found = []
        if not str(r.get("message") or "").strip():
            found.append(f"{where}: outcome {outcome} without a message: a run says why an item was {outcome}")
        if failed:
            found.append(f"{where}: outcome {outcome}, but its verdicts say failed "
                         f"({', '.join(str(v.get('metric')) for v in failed[:3])})")
        return found
    if outcome == "failed" and not failed:
        return [f"{where}: outcome failed, but " + ("it holds no verdict" if not recorded else "its verdicts say passed")]
    if outcome == "passed" and failed:
        return [f"{where}: outcome passed, but its verdicts say failed "
                f"({', '.join(str(v.get('metric')) for v in failed[:3])})"]
    return []


def selection(argv: Iterable[Any]) -> str | None:
    """How the run's command line selected fewer items than its suites hold (`-k allreduce`), or None."""
    args = [str(a) for a in argv][1:]
    for i, arg in enumerate(args):
        for flag in SELECTING:
            if arg == flag:
                value = args[i + 1] if i + 1 < len(args) and flag in ("-k", "-m", "--deselect") else ""
                return f"{flag} {value}".rstrip()
            if arg.startswith(f"{flag}=") or len(flag) == 2 and arg.startswith(flag) and len(arg) > 2:
                return arg
        if "::" in arg and not arg.startswith("-"):  # a suite's item named by node id
            return arg
    return None


def plan_problems(rec: Record, suites: Mapping[str, Any], wheres: Sequence[str], notes: list[str]) -> list[str]:
    """The plan against the kept suites, and each result (named by `wheres`, in order) against the plan and the
    run's nodes. `suites`: file -> Suite, those kept and read (a suite listed but not kept was named already)."""
    from clustercheck.run.scopes import rounds

    header, name = rec.header, rec.path.name
    nodes = [str(n) for n in header.get("nodes") or ()]
    run_nodes = {*nodes, *(header.get("absent") or {})}  # a node that never joined has its items planned
    out: list[str] = []
    if rec.plan is None:
        if rec.end is None:
            return out  # killed before its plan: INCOMPLETE, and what it holds is all there is
        notes.append(f"{name}: no plan line (a record written before plans): the suites are checked against its "
                     f"results")
        planned: Sequence[Mapping[str, Any]] = [r for r in rec.results if not is_layout(r)]
        at = f"{name}"
    else:
        planned = rec.plan
        at = f"{name}:{rec.lines.plan}" if rec.lines.plan else name
    listed = {str(s.get("file")) for s in header.get("suites") or ()}
    checks = {(file, c.id): c for file, suite in suites.items() for c in suite.checks}
    for item in planned:
        key = (str(item.get("suite_file")), str(item.get("check")))
        check = checks.get(key)
        if check is None:
            if key[0] in suites or key[0] not in listed:
                out.append(f"{at}: planned item {item.get('name')}: check {key[1]!r} of {key[0]} is not in the run's "
                           f"suite files")
        elif (item.get("measure"), item.get("scope")) != (check.measure, check.scope):
            out.append(f"{at}: planned item {item.get('name')}: measure {item.get('measure')} scope "
                       f"{item.get('scope')}, but check {check.id!r} ({check.where}) is measure {check.measure} "
                       f"scope {check.scope}")
    # the plan's own selection (however made: argv, PYTEST_ADDOPTS, addopts, a conftest); argv for older records
    sel = rec.selection
    chosen = (f"a selection ({sel.get('selected')} of {sel.get('collected')} items)" if sel
              else selection(header.get("argv") or ()))
    places = [*nodes, *(str(n) for n in header.get("absent") or {})]  # the plan names an absent node's items too
    covered: dict[tuple[str, str], set[Any]] = {}
    for i in planned:
        covered.setdefault((str(i.get("suite_file")), str(i.get("check"))), set()).add(i.get("node"))
    unplanned = [c for key, c in checks.items() if key not in covered and any(rounds(c.scope, places))]
    # a check that kept some items: each place its scope gives over the run's nodes, matched by the item's node
    # (a record without a plan line has only its results, and a node lost with its item left no result)
    unplaced = [(c, where) for key, c in checks.items() if key in covered and c.scope in PLACED
                and rec.plan is not None for items in rounds(c.scope, places) for where in items
                if where not in covered[key]]
    if (unplanned or unplaced) and chosen:
        notes.append(f"{at}: the plan cannot be checked against the suites: {chosen} selected the items to run "
                     f"({len(unplanned)} check(s) of the suites have none, {len(unplaced)} item(s) of the others' "
                     f"nodes are not planned)")
    elif unplanned or unplaced:
        out += [f"{at}: check {c.id!r} ({c.where}) is in the suite as run, but the record plans no item of it: "
                f"deleted from the record" for c in unplanned]
        out += [f"{at}: check {c.id!r} ({c.where}) is scope {c.scope}, which plans {item_name(c.id, where)} "
                f"({'the whole cluster' if where is None else 'node ' + where}) on this run's nodes, but the record "
                f"plans no such item: deleted from the record" for c, where in unplaced]
    ids = {item_id(i) for i in planned}
    for where, r in zip(wheres, rec.results, strict=True):
        if rec.plan is not None and not is_layout(r) and item_id(r) not in ids:
            out.append(f"{where}: not an item of the run's plan")
        strangers = [str(n) for n in r.get("nodes") or () if n not in run_nodes]
        if strangers:
            out.append(f"{where}: node(s) {', '.join(strangers)} not among the run's nodes ({', '.join(nodes)})")
    return out
