#!/usr/bin/env bash
# GPU call 15 (2026-11-27): the code after the Slurm launcher became a step of node agents (a68a1a4: a rank
# takes its pool key on stdin only, the per-task GPU binding is gone) under tests/gpu, and gpu-smoke through
# the hosts launcher's agent (the code the slurm launcher now shares). Logs in $V, packed into $OUT/v15.tar.gz.
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
begin v15
gpu_facts
install_wheels
step gpu-tests 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
W=$(mktemp -d); cd "$W" || exit 1
step hosts-smoke 120 clustercheck run gpu-smoke --launcher hosts --hosts localhost --host-command '{python}' --out "$W/h"
cat "$V/steps.txt"; grep -E "passed|failed|error" "$V/gpu-tests.txt" | tail -3; grep -E "passed|failed|INCOMPLETE|exclude" "$V/hosts-smoke.txt" | tail -4
