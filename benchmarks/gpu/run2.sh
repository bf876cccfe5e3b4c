#!/usr/bin/env bash
# GPU validation, call 2: tests/gpu after the fixes, timing cross-checks, an independent copy reference,
# pool memory, a short burn with --counters, and the watch cost with more repeats. Logs in $V.
V=${V:-/tmp/v2}; mkdir -p "$V"
# shellcheck source=benchmarks/gpu/step.sh
source "$(dirname "$0")/step.sh"
step gpu-tests 150 python3 -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider
step timing 90 python3 benchmarks/gpu/timing_crosscheck.py
step copy-reference 60 python3 benchmarks/gpu/copy_reference.py
step pool-memory 120 python3 benchmarks/gpu/pool_memory.py
step burn-smoke 120 python3 -m clustercheck run benchmarks/gpu/burn-smoke.yaml --repeat 2 --counters --out /tmp/cc2 -v
step nvlink-8x 30 python3 -m clustercheck probe nvlink --platform h100-sxm-8x
step nvlink-1x 30 python3 -m clustercheck probe nvlink --platform h100-sxm-1x
step watch-cost 150 python3 benchmarks/gpu/../watch_cost.py --repeats 4 --duration 3
cp -r /tmp/cc2 "$V/cc" 2>/dev/null
cat "$V/steps.txt"
