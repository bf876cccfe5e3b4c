#!/usr/bin/env bash
# GPU validation, call 3: the burn with its NVML watch and --counters, the counter readers live, eager
# against graph timing, the timing cross-checks again, and the default suite. Logs in $V.
V=${V:-/tmp/v3}; mkdir -p "$V"
# shellcheck source=benchmarks/gpu/step.sh
source "$(dirname "$0")/step.sh"
step burn-smoke 150 python3 -m clustercheck run benchmarks/gpu/burn-smoke.yaml --repeat 2 --counters --out /tmp/cc3 -v
step counters-live 30 python3 benchmarks/gpu/counters_live.py
step timing-graph 150 python3 benchmarks/gpu/timing_graph.py
step timing 90 python3 benchmarks/gpu/timing_crosscheck.py
step run-default 90 python3 -m clustercheck run --out /tmp/cc3d -v
cp -r /tmp/cc3 "$V/cc" 2>/dev/null; cp /tmp/cc3d/latest/results.json "$V/default-results.json" 2>/dev/null
cat "$V/steps.txt"
