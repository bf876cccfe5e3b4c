#!/usr/bin/env bash
# GPU validation, call 5: at the final code, tests/gpu, the timing cross-checks with their graph rule,
# every probe (fabric included) with and without an HGX expectation, and the default suite. Logs in $V.
V=${V:-/tmp/v5}; mkdir -p "$V"
step() { local name=$1 limit=$2; shift 2; echo "== $name: $* (limit ${limit}s)"; local t0=$SECONDS
         timeout "$limit" "$@" > "$V/$name.txt" 2>&1; local rc=$?
         echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"; }
step gpu-tests 200 python3 -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider
step timing 120 python3 benchmarks/gpu/timing_crosscheck.py
step probe-all 60 python3 -m clustercheck probe all
step probe-fabric-8x 30 python3 -m clustercheck probe fabric --platform h100-sxm-8x
step probe-nvlink-8x 30 python3 -m clustercheck probe nvlink --platform h100-sxm-8x
step run-default 90 python3 -m clustercheck run --out /tmp/cc5 -v
cat "$V/steps.txt"
