"""Reports rendered from the run record: JSON results, JUnit XML, HTML."""

from __future__ import annotations

import json
from pathlib import Path

from clustercheck.results import SCHEMA_VERSION, counts, read_record


def render_all(record: Path, out_dir: Path) -> dict[str, Path]:
    from clustercheck.report.html import render_html
    from clustercheck.report.junit import render_junit

    header, results, end = read_record(record)
    paths = {"json": out_dir / "results.json", "junit": out_dir / "junit.xml", "html": out_dir / "report.html"}
    summary = {"schema": SCHEMA_VERSION, "run": header, "end": end, "counts": counts(results), "results": results}
    paths["json"].write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    paths["junit"].write_bytes(render_junit(header, results))
    paths["html"].write_text(render_html(header, results, end), encoding="utf-8")
    return paths
