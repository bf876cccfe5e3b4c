#!/usr/bin/env bash
# GPU call 7 (not yet run): NCCL ranks forked from the zygote (run/zygote.py), which is on for NCCL pools only
# with CLUSTERCHECK_ZYGOTE=1 until this has passed on a GPU. The wheel installed as run6.sh does, then from an
# empty directory: gpu-smoke with forked ranks and with fresh ones (--timings each, and the pool lines of the
# record), tests/gpu/ with forked ranks, and the pool-start benchmark on NCCL-less gloo ranks of this host.
# What would flip the default: every step passing, and the forked run's figures matching the fresh run's.
# Logs in $V, packed into $OUT/v7.tar.gz when OUT is set.
V=${V:-/tmp/v7}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl
W=$(mktemp -d); cd "$W" || exit 1
step smoke-forked 120 env CLUSTERCHECK_ZYGOTE=1 clustercheck run gpu-smoke --timings --out "$W/f"
step smoke-fresh 120 env CLUSTERCHECK_ZYGOTE=0 clustercheck run gpu-smoke --timings --out "$W/n"
step gpu-tests-forked 300 env CLUSTERCHECK_ZYGOTE=1 python3 -m pytest -q -p no:cacheprovider "$R/tests/gpu"
step pool-start 120 python3 "$R/benchmarks/pool_start.py" --pools 4 --ranks 8
cp "$W"/f/latest/run.jsonl "$V/forked-run.jsonl" 2>/dev/null
cp "$W"/n/latest/run.jsonl "$V/fresh-run.jsonl" 2>/dev/null
cat "$V/steps.txt"
[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/v7.tar.gz" .
for f in smoke-forked smoke-fresh gpu-tests-forked pool-start; do echo "### $f"; grep -v "^  " "$V/$f.txt" | tail -30; done
