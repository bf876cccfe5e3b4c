#!/usr/bin/env bash
# GPU call 8: after run7.sh passed, NCCL ranks fork from the zygote by default. The wheel installed as run6.sh
# does, then from an empty directory and with no CLUSTERCHECK_ZYGOTE set: tests/gpu (among them: NCCL in a
# forked rank reads the variables set after the fork), gpu-smoke and the one-GPU quick gate (--timings each).
# Logs in $V, packed into $OUT/v8.tar.gz when OUT is set.
V=${V:-/tmp/v8}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
unset CLUSTERCHECK_ZYGOTE
step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl
W=$(mktemp -d); cd "$W" || exit 1
step gpu-tests 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
step smoke 120 clustercheck run gpu-smoke --timings --out "$W/s"
step quick-gate 120 clustercheck run quick-gate-nvlink8 --platform h100-sxm-1x --timings --out "$W/q"
cp "$W"/s/latest/run.jsonl "$V/smoke-run.jsonl" 2>/dev/null
cat "$V/steps.txt"
[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/v8.tar.gz" .
for f in gpu-tests smoke quick-gate; do echo "### $f"; grep -v "^ *$" "$V/$f.txt" | tail -40; done
