#!/usr/bin/env bash
# GPU call 7: NCCL ranks forked from the zygote (run/zygote.py), on for NCCL pools only with
# CLUSTERCHECK_ZYGOTE=1 until this has passed on a GPU. The wheel installed as run6.sh does, then from an
# empty directory:
#   gpu-smoke with forked ranks and with fresh ones (--timings each, and the record of each);
#   tests/gpu with forked ranks (among them: a check's NCCL_ALGO reaches NCCL in a rank forked from the
#   zygote that served the plain pool);
#   the one-GPU quick gate with forked ranks (--timings);
#   8 ranks' start, fresh and forked (benchmarks/gpu/rank_start.py), for the 8-GPU quick gate's estimate;
#   the whole-process pairs of benchmarks/gpu/startup.py with forked ranks (gpu-smoke within 8 s);
#   the pool-start benchmark on gloo ranks of this host.
# What would flip the default: every step passing, and the forked run's figures matching the fresh run's.
# Logs in $V, packed into $OUT/v7.tar.gz when OUT is set.
V=${V:-/tmp/v7}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl
step facts 60 bash -c 'nvidia-smi -L; nproc; python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"'
W=$(mktemp -d); cd "$W" || exit 1
step smoke-forked 120 env CLUSTERCHECK_ZYGOTE=1 clustercheck run gpu-smoke --timings --out "$W/f"
step smoke-fresh 120 env CLUSTERCHECK_ZYGOTE=0 clustercheck run gpu-smoke --timings --out "$W/n"
step gpu-tests-forked 240 env CLUSTERCHECK_ZYGOTE=1 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
step quick-gate-forked 120 env CLUSTERCHECK_ZYGOTE=1 clustercheck run quick-gate-nvlink8 --platform h100-sxm-1x --timings --out "$W/q"
step rank-start 120 bash -c "python3 '$R/benchmarks/gpu/rank_start.py' --procs 8 8 && python3 '$R/benchmarks/gpu/rank_start.py' --procs 8 8 --fork"
step startup-forked 200 env CLUSTERCHECK_ZYGOTE=1 python3 "$R/benchmarks/gpu/startup.py" --rounds 3
step pool-start 90 python3 "$R/benchmarks/pool_start.py" --pools 4 --ranks 8
cp "$W"/f/latest/run.jsonl "$V/forked-run.jsonl" 2>/dev/null
cp "$W"/n/latest/run.jsonl "$V/fresh-run.jsonl" 2>/dev/null
cat "$V/steps.txt"
[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/v7.tar.gz" .
for f in smoke-forked smoke-fresh gpu-tests-forked quick-gate-forked rank-start startup-forked pool-start; do
  echo "### $f"; grep -v "^  " "$V/$f.txt" | tail -25; done
