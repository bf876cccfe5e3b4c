"""Reports rendered from the run record: JSON results, SLA evidence, JUnit XML, HTML."""

from __future__ import annotations

import json
from pathlib import Path

from clustercheck.record import SCHEMA_VERSION, counts, load
from clustercheck.report.status import run_status


def render_all(record: Path, out_dir: Path) -> dict[str, Path]:
    from clustercheck.report.html import render_html
    from clustercheck.report.junit import render_junit
    from clustercheck.report.sla import evidence

    rec = load(record)
    header, results, end = rec.header, rec.results, rec.end
    status = run_status(rec)
    paths = {"json": out_dir / "results.json", "sla": out_dir / "sla.json", "junit": out_dir / "junit.xml",
             "html": out_dir / "report.html"}
    summary = {"schema": SCHEMA_VERSION, "run": header, "end": end, "counts": counts(results), **status,
               "results": results}
    paths["json"].write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    sla = evidence(header, results, end)
    sla["complete"], sla["incomplete"] = status["incomplete"] is None, status["incomplete"]
    paths["sla"].write_text(json.dumps(sla, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    paths["junit"].write_bytes(render_junit(header, results, rec.not_run(), (status["incomplete"] or {}).get("reason")))
    paths["html"].write_text(render_html(header, results, end, sla, status), encoding="utf-8")
    return paths
