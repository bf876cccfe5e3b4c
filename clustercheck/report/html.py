"""Self-contained HTML report: one autoescaped jinja2 template, inline CSS and SVG, no script, no network.
The figures come from `figures.py` as coordinates and labels; the template draws them."""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Sequence

from jinja2 import Environment, PackageLoader, select_autoescape

from clustercheck.judging import verdicts as vt
from clustercheck.kinds import figure_of
from clustercheck.fabric.comm import line as comm_line
from clustercheck.record.schema import counts, item_id
from clustercheck.record.statement import versions
from clustercheck.report.status import selection_text
from clustercheck.report.figures import bars, heatmap, node_plot, plot, sweep_metric
from clustercheck.units import fmt, fmt_unit, format_bytes, format_size, is_finite_number, is_number, plural

_env = Environment(loader=PackageLoader("clustercheck.report", "templates"),
                   autoescape=select_autoescape(default=True, default_for_string=True))
_env.filters["num"] = fmt
_env.filters["size"] = format_size
_env.filters["unit"] = fmt_unit
_env.filters["plural"] = lambda n, word: plural(int(n), word)
_env.filters["margin"] = vt.margin_text
_env.filters["rule"] = vt.rule_text


# -- the page ---------------------------------------------------------------------------------------

def verdict_summary(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node table's short form: check-wide verdicts as they are; per-subject ones (a verdict per GPU
    or pair) folded per metric into the worst subject and how many failed."""
    def one(v: dict[str, Any]) -> dict[str, Any]:
        return {"passed": v["passed"], "text": f"{_who(v)}{v['metric']} {vt.measured_text(v)} ({_rule(v)})"}

    out: list[dict[str, Any]] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for v in verdicts:
        if v.get("subject"):
            if v["metric"] not in groups:
                out.append({"group": v["metric"]})
            groups.setdefault(v["metric"], []).append(v)
        else:
            out.append(one(v))
    for i, entry in enumerate(out):
        if "group" not in entry:
            continue
        vs = groups[entry["group"]]
        if len(vs) == 1:
            out[i] = one(vs[0])
            continue
        failed = sum(1 for v in vs if not v["passed"])
        text = f"{entry['group']}: {len(vs) - failed} of {len(vs)} pass"
        if all(vt.finite_margin(v) for v in vs):  # a numeric limit: name the worst subject
            worst = min(vs, key=lambda v: v["margin"])
            text += f", worst {worst['subject']} {vt.measured_text(worst)} ({_rule(worst)})"
        elif failed:  # e.g. a probe's verdicts: name the first failing subject
            text += f", failing {next(v['subject'] for v in vs if not v['passed'])}"
        out[i] = {"passed": failed == 0, "text": text}
    return out


MESSAGE_LINE = 300  # the Checks table's cell: the message's first line up to this; the whole one is in the item's section


def message_line(message: Any) -> tuple[str, bool]:
    """The Checks table's short form of a message, and whether it is cut (then the cell links to the whole
    message): a 100k-character NCCL log there made the table as wide as the log."""
    text = "" if message is None else str(message)
    first = text.strip().split("\n", 1)[0].rstrip()
    cut = len(first) > MESSAGE_LINE or first != text.strip()
    return first[:MESSAGE_LINE], cut


def _who(v: dict[str, Any]) -> str:
    return f"{v['subject']} " if v.get("subject") else ""


def _rule(v: dict[str, Any]) -> str:
    """The rule without its unit (the measured value beside it has one): `>= 48`, `expected NV18`."""
    return f"expected {fmt(v['limit'])}" if vt.is_expectation(v) else f"{v['op']} {fmt(v['limit'])}"


def _burn_in(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each item of a repeated run: its summary and its metric over the repetitions, with its limit."""
    from clustercheck.record.burnin import grouped, summarize
    from clustercheck.report.figures import repetition_plot

    out = []
    runs_of = grouped(results)
    for s in summarize(results):
        limit = next((v.get("limit") for r in runs_of[s.item] for v in r.get("verdicts") or ()
                      if v.get("metric") == s.metric and isinstance(v.get("limit"), (int, float))), None)
        out.append({**s.as_dict(), "unmeasured": sum(1 for v in s.values if not is_finite_number(v)),
                    "plot": repetition_plot(list(zip(s.measured_in, s.values)), limit,
                                                           f"{s.metric} ({s.unit})")})
    return out


def network(header: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each node's network facts (fabric/rdma.py), as read by its first rank: ports, the GPU nearest each
    NIC and NVMe drive with the PCIe path's slowest link, GPUDirect RDMA, the line rate, the problems. A node
    of the run (`nodes`, and `absent`: those that never joined) with no network facts gets a row that says
    they were not read and why: a node never measured is never left out in silence."""
    from clustercheck.fabric.linerate import of_node
    from clustercheck.judging.fabric import node_net

    facts = header.get("facts") or {}
    run_nodes = [str(n) for n in header.get("nodes") or ()]
    absent = {str(n): str(why) for n, why in (header.get("absent") or {}).items()}
    nodes = dict(header.get("node_facts") or {})
    if not nodes:  # a one-node run records its node's facts as the run's (record/statement.py reads them so)
        only = run_nodes[0] if len(run_nodes) == 1 else None
        if facts or not run_nodes:
            nodes = {str(facts.get("host") or only or "node"): facts}
        if facts and only is not None:
            run_nodes = []  # the one node these facts are of, whatever name the host gives itself
    out = []
    for node in [*nodes, *(n for n in dict.fromkeys([*run_nodes, *absent]) if n not in nodes)]:
        f = nodes.get(node)
        raw = (f or {}).get("network") if isinstance(f, Mapping) else None
        if not raw:
            out.append({"node": node, "ports": [], "nvme": [], "problems": [],
                        "not_read": f"network facts not read: {_unread_why(node, f, absent)}"})
            continue
        net = node_net(node, raw)
        if isinstance(net, str):  # that node's facts do not read: its problem, the other nodes shown as they are
            out.append({"node": node, "ports": [], "nvme": [], "gdr": "-", "unread": True, "problems": [net],
                        "line_rate": "unknown: its network facts do not read"})
            continue
        paths = net.nic_paths
        ports = [{"name": p.name, "state": p.state, "phys": p.phys_state, "rate": p.rate_text or "-",
                  "layer": p.link_layer, "pci": p.pci or "-",
                  "gpu": (paths.get(p.device) or {}).get("to") or "-", "level": (paths.get(p.device) or {}).get("level") or "-",
                  "bottleneck": (paths.get(p.device) or {}).get("bottleneck") or "-"} for p in net.ports]
        nvme = [{"bdf": bdf, "gpu": v.get("to") or "-", "level": v.get("level") or "-",
                 "bottleneck": v.get("bottleneck") or "-"} for bdf, v in sorted(net.nvme_paths.items())]
        out.append({"node": node, "ports": ports, "nvme": nvme, "gdr": net.gdr.text() if net.gdr else "-",
                    "line_rate": of_node(net).text(), "problems": list(net.problems)})
    return out


def _unread_why(node: str, facts: Any, absent: Mapping[str, str]) -> str:
    """Why a node of the run has no network facts in the record, as far as the record says."""
    if node in absent:
        return f"{node} never joined ({absent[node]})"
    if facts is None:
        return f"the record holds no facts of {node} (its first rank never reported them)"
    return f"{node}'s first rank reported none (its facts in the record hold no network facts)"


# a `vs baseline` verdict's detail (run/judge.Baseline._verdict): `B -> C unit[, within the baseline's spread
# (band)] (percent; direction is better, ...)`
_CHANGE = re.compile(r"^(?P<base>\S+) -> (?P<now>\S+)(?: (?P<unit>[^,(]+?))?(?P<noise>, within the baseline's "
                     r"spread \([^)]*\))? \((?P<why>.*)\)$", re.S)


def comparison(results: Sequence[Mapping[str, Any]], end: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`run --compare BASELINE` as report.html shows it: the verdict against the baseline (INCOMPLETE,
    REGRESSION, NOT JUDGED, in compare's words) with what the run's end said of the baseline, a row per
    metric judged against it (regressions first, then what could not be judged), and each item's note of
    what was not compared. None for a run without --compare."""
    compared = (end or {}).get("compare") or {}
    rows: list[dict[str, Any]] = []
    not_compared: list[tuple[str, str]] = []
    for r in results:
        for v in r.get("verdicts") or ():
            if str(v.get("metric") or "").endswith("vs baseline"):
                rows.append(_change_row(r["name"], v))
        message = str(r.get("message") or "")
        if r.get("outcome") == "error" and "the baseline (--compare " in message:  # run/judge.py's harness errors
            rows.append({"item": r["name"], "subject": "-", "metric": "-", "baseline": "-", "now": "-", "change": "-",
                         "word": "NOT JUDGED", "css": "error", "why": message.strip().split("\n", 1)[0]})
        not_compared += [(r["name"], str(n)) for n in r.get("notes") or () if "not compared" in str(n)]
    if not compared and not rows:
        return None
    baseline = compared.get("baseline") or next((str(v.get("origin")) for r in results for v in r.get("verdicts") or ()
                                                 if str(v.get("metric") or "").endswith("vs baseline")), "")
    rows.sort(key=lambda row: {"REGRESSION": 0, "NOT JUDGED": 1}.get(row["word"], 2))  # stable: record order within
    said = [f"not judged against the --compare baseline {baseline}: {line}" for line in compared.get("not_judged") or ()]
    words = [row["word"] for row in rows]
    judged = len(words) - words.count("NOT JUDGED")
    verdict = ("INCOMPLETE" if compared.get("incomplete") else "REGRESSION" if "REGRESSION" in words
               else "NOT JUDGED" if said or "NOT JUDGED" in words else "")
    if compared.get("incomplete"):  # as report/status.py says it: the run is INCOMPLETE
        said.insert(0, f"the --compare baseline {baseline} is INCOMPLETE: {compared['incomplete']}")
    count = (f"{judged} metric(s) compared: {words.count('REGRESSION')} regression(s), {words.count('NOT JUDGED')} "
             f"not judged, {len(not_compared)} not compared")
    return {"baseline": baseline, "verdict": verdict, "count": count, "said": said, "rows": rows,
            "not_compared": not_compared, "css": "failed" if verdict == "REGRESSION" else
            "error" if verdict or not judged else "passed"}  # nothing compared is no pass


def _change_row(item: str, v: Mapping[str, Any]) -> dict[str, Any]:
    """One `vs baseline` verdict as a row: the baseline's value, this run's, the change, and why, in the
    words of its detail (the terminal shows the same); a `not judged` one says what could not be told."""
    detail = str(v.get("detail") or "")
    subject = str(v.get("subject") or "-")
    if v.get("measured") == "not judged":  # run/judge.Baseline._unjudged: `<metric>: <why>`
        metric, _, why = detail.partition(": ")
        return {"item": item, "subject": subject, "metric": metric if why else "-", "baseline": "-", "now": "-",
                "change": "not judged", "word": "NOT JUDGED", "css": "error", "why": why or detail}
    m = _CHANGE.match(detail)
    word, css = ("pass", "passed") if v.get("passed") else ("REGRESSION", "failed")
    metric = str(v.get("metric") or "").removesuffix(" vs baseline")
    if m is None:  # a detail of another shape (another version wrote it): said whole, never dropped
        return {"item": item, "subject": subject, "metric": metric, "baseline": "-", "now": "-",
                "change": vt.measured_text(v), "word": word, "css": css, "why": detail or vt.rule_text(v)}
    unit = (m["unit"] or "").strip()
    percent, _, why = m["why"].partition("; ")
    noise = (m["noise"] or "").removeprefix(", ")
    return {"item": item, "subject": subject, "metric": metric, "baseline": f"{m['base']} {unit}".strip(),
            "now": f"{m['now']} {unit}".strip(), "change": vt.measured_text(v) if v.get("unit") == "%" else percent,
            "word": word, "css": css, "why": "; ".join(x for x in (noise, why) if x)}


_BYTE_FACTS = ("host_memory", "gpu_memory_free")  # facts in bytes, shown as GiB


def environment(header: Mapping[str, Any], results: Sequence[Mapping[str, Any]] = ()) -> list[tuple[str, str]]:
    """Facts as (name, text) rows; nested mappings (versions) flattened to `versions.torch`; the network has
    its own section (`network`). Then CUDA and NCCL as the ranks loaded them (`ranks.nccl`: the library
    that ran, which need not be the one torch was built with)."""
    loaded = versions(header, results)
    rows: list[tuple[str, str]] = []
    for key, value in (header.get("facts") or {}).items():
        if key == "network":
            continue
        if isinstance(value, dict):
            rows += [(f"{key}.{k}", "-" if v is None else str(v)) for k, v in value.items()]
        elif isinstance(value, list):
            rows.append((key, ", ".join(f"0x{v:04x}" if key == "pci_device_ids" and isinstance(v, int) else str(v)
                                        for v in value) or "-"))
        else:
            rows.append((key, "-" if value is None else format_bytes(value) if key in _BYTE_FACTS and
                         is_number(value) else str(value)))
    return rows + [(f"ranks.{k}", str(loaded[k])) for k in ("cuda", "nccl") if loaded.get(k)]


def exclusion(ex: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The exclusion line as report.html shows it under the banner: the nodes excluded with reasons, and each
    drain or taint said as the terminal says it (`drain failed (exit 1: ...)`, an error): a gate must tell
    "failed and drained" from "failed and still schedulable". None when it excluded nothing and did nothing."""
    from clustercheck.record.exclude import act_line, acts

    if not ex or not (ex.get("hostlist") or acts(ex)):
        return None
    return {"hostlist": ex.get("hostlist") or "", "reasons": list((ex.get("reasons") or {}).items()),
            "acts": [{"text": act_line(act, d), "failed": d["rc"] not in (None, 0)}
                     for act, d in acts(ex)]}


def render_html(header: Mapping[str, Any], results: Sequence[Mapping[str, Any]], end: Mapping[str, Any] | None,
                sla: dict[str, Any] | None = None, status: Mapping[str, Any] | None = None,
                not_run: Sequence[Mapping[str, Any]] = (), exclude: Mapping[str, Any] | None = None) -> str:
    return "".join(html_chunks(header, results, end, sla, status, not_run, exclude))


def html_chunks(header: Mapping[str, Any], results: Sequence[Mapping[str, Any]], end: Mapping[str, Any] | None,
                sla: dict[str, Any] | None = None, status: Mapping[str, Any] | None = None,
                not_run: Sequence[Mapping[str, Any]] = (), exclude: Mapping[str, Any] | None = None) -> Iterator[str]:
    """report.html in the pieces the template yields them: written as they come, the page of a large run is
    never one string (its 90 MiB at 20,000 results, and as many again encoded). `not_run`: the planned items
    an incomplete run has no result for (Record.not_run()), counted per node beside the outcomes; `exclude`:
    the record's exclusion line."""
    from clustercheck.record.burnin import folded, repeated

    burn_in = _burn_in(results) if repeated(results) else []
    results = folded(results)  # a repeated run: each item once (its worst repetition), its series below
    checks = []
    for i, r in enumerate(results, 1):
        metric, unit, limit = sweep_metric(r.get("verdicts") or [])  # time per operation for a latency check
        rows = r.get("rows") or []
        subject_rows = bool(rows) and "subject" in rows[0]
        figure = figure_of(r)
        env = (r.get("pool") or {}).get("env") or {}
        line, cut = message_line(r.get("message"))
        checks.append({**r, "anchor": f"check-{i}", "verdict_summary": verdict_summary(r.get("verdicts") or []),
                       "message_line": line, "message_cut": cut,
                       # a note that something was not judged beside the verdicts: said where the verdicts are
                       "unjudged": [str(n) for n in r.get("notes") or () if "not judged" in str(n)],
                       "comm_line": comm_line(r["comm"]) if r.get("comm") else "",
                       "pool_env": " ".join(f"{k}={v}" for k, v in sorted(env.items())),
                       "plot": plot(rows, limit, metric, unit) if figure == "sweep" else None,
                       "heatmap": heatmap(r) if subject_rows and figure == "matrix" else None,
                       "bars": bars(r) if subject_rows and figure == "bars" else None})
    by_node: dict[str, dict[str, int]] = {}
    node_items: dict[str, list[dict[str, Any]]] = {}
    for r in checks:
        node = r.get("node") or "(cluster)"
        by_node.setdefault(node, dict.fromkeys(("passed", "failed", "error", "skipped"), 0))[r["outcome"]] += 1
        node_items.setdefault(node, []).append(r)
    not_run_of: dict[str, list[str]] = {}  # a node's planned items with no result: never a row that reads clean
    for p in not_run:
        node = p.get("node") or "(cluster)"
        c = by_node.setdefault(node, dict.fromkeys(("passed", "failed", "error", "skipped"), 0))
        c["not run"] = c.get("not run", 0) + int(p.get("repetitions") or 1)
        not_run_of.setdefault(node, []).append(item_id(p))
        node_items.setdefault(node, [])
    node_plots = {node: node_plot(items) for node, items in node_items.items()}
    return _env.get_template("report.html.j2").generate(
        run=header, end=end, results=checks, counts=counts(results), by_node=by_node, node_items=node_items,
        node_plots=node_plots, not_run_of=not_run_of, facts=header.get("facts") or {}, environment=environment(header, results), sla=sla,
        network=network(header), exclusion=exclusion(exclude), compare=comparison(checks, end),
        burn_in=burn_in,
        status=status or {"verdict": "", "incomplete": None, "untested": []},
        selection_said=selection_text(status["selection"]) if status and status.get("selection") else None)
