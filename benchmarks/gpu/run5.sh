#!/usr/bin/env bash
# GPU validation, call 5: at the final code, tests/gpu, the timing cross-checks with their graph rule,
# every probe (fabric included) with and without an HGX expectation, and the default suite. Logs in $V.
V=${V:-/tmp/v5}; mkdir -p "$V"
# shellcheck source=benchmarks/gpu/step.sh
source "$(dirname "$0")/step.sh"
step gpu-tests 200 python3 -m pytest tests/gpu -m gpu -v -rs -p no:cacheprovider
step timing 120 python3 benchmarks/gpu/timing_crosscheck.py
step probe-all 60 python3 -m clustercheck probe all
step probe-fabric-8x 30 python3 -m clustercheck probe fabric --platform h100-sxm-8x
step probe-nvlink-8x 30 python3 -m clustercheck probe nvlink --platform h100-sxm-8x
step run-default 90 python3 -m clustercheck run --out /tmp/cc5 -v
cat "$V/steps.txt"
