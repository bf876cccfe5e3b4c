"""GPU validation: the --counters readers on a live driver: one snapshot, what each reader read (counts
by source, a few names and values) and every read error, as JSON.

    python benchmarks/gpu/counters_live.py"""

from __future__ import annotations

import dataclasses
import json

from clustercheck.counters import nvml_counters, snapshot

reading = nvml_counters.read()
print(json.dumps(dataclasses.asdict(reading), default=str)[:6000])
snap = snapshot.take()
d = dataclasses.asdict(snap)
print(json.dumps({k: (len(v) if isinstance(v, (list, tuple)) else v) for k, v in d.items()}, default=str)[:3000])
print(json.dumps({"errors": d.get("errors")}, default=str)[:3000])
