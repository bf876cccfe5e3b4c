#!/usr/bin/env bash
# GPU call 6, issue 32 (start-up): clustercheck installed from its wheel as a user would (the carried .whl/:
# clustercheck and the two dependencies the GPU image lacks), then from an empty directory: --timings of
# gpu-smoke, of its one GEMM check and of the 8-GPU quick gate on this one GPU; the whole-process pairs
# against the bare script (benchmarks/gpu/startup.py); N ranks started at once (benchmarks/gpu/rank_start.py).
# With AGAIN=1 only the install, the --timings of gpu-smoke and its GEMM check, and the pairs (a rerun after a
# change); with BEFORE=1 also an earlier wheel (.whl/before/, installed with --target) in every round of the
# pairs, and no --timings of the GEMM check. Logs in $V, packed into $OUT/v6.tar.gz when OUT is set (at most 8 files come back from the lent machine).
V=${V:-/tmp/v6}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl
[ -n "$BEFORE" ] && step install-before 120 python3 -m pip install -q --no-index --no-deps --target /tmp/before "$R"/.whl/before/*.whl
step facts 60 bash -c 'nvidia-smi -L; nproc; python3 -c "import torch, pytest; print(torch.__version__, torch.cuda.nccl.version(), pytest.__version__)"; which clustercheck; python3 -m pip list 2>/dev/null | grep -ci pytest'
W=$(mktemp -d); cd "$W" || exit 1
[ -z "$AGAIN" ] && step import-torch 60 bash -c 'TIMEFORMAT="import torch + CUDA context: %R s"; for i in 1 2 3; do time python3 -c "import torch; torch.zeros(1, device=\"cuda\")"; done'
step timings-smoke 120 clustercheck run gpu-smoke --timings --out "$W/t1"
[ -z "$BEFORE" ] && step timings-gemm 120 clustercheck run gpu-smoke -k gemm --timings --out "$W/t2"
step startup "${STARTUP_LIMIT:-300}" python3 "$R/benchmarks/gpu/startup.py" --rounds "${ROUNDS:-5}" ${BEFORE:+--before /tmp/before}
[ -z "$AGAIN" ] && step rank-start 120 python3 "$R/benchmarks/gpu/rank_start.py" --procs 1 8 16 32
[ -z "$AGAIN" ] && step timings-quick-gate 180 clustercheck run quick-gate-nvlink8 --platform h100-sxm-1x --timings --out "$W/t3"
cp "$W"/t1/latest/run.jsonl "$V/smoke-run.jsonl" 2>/dev/null
cat "$V/steps.txt"
[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/v6.tar.gz" .
for f in timings-smoke timings-gemm startup rank-start timings-quick-gate; do echo "### $f"; grep -v "^  " "$V/$f.txt" | tail -40; done
