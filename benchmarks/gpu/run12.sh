#!/usr/bin/env bash
# GPU call 12 (2026-11-27): the hosts launcher's node agents on a GPU (docs/multi-node.md; they had run only
# on the CPU machine), and the code since call 11 (prestart's zygote, launcher.here) under tests/gpu and
# issue 32's start-up benchmark. The wheel installed as run6.sh does, then from an empty directory:
#   tests/gpu;
#   gpu-smoke under --launcher hosts --hosts localhost --host-command '{python}', ROUNDS times (default 3),
#   the processes listed every 2 s: the agent's zygote (comm cc-zygote) must be the agent's child and the
#   NCCL rank the zygote's;
#   NCCL 2.30 built from .gpu/nccl (../shared/gpu-multirank.md), then two "hosts" (node-[0-1]) on this one
#   GPU, each agent started by the template with that build in LD_PRELOAD and NCCL_MULTI_RANK_GPU_ENABLE=1,
#   running benchmarks/gpu/two-agents.yaml: one NCCL communicator across ranks forked from two agents;
#   benchmarks/gpu/startup.py --rounds 3 (issue 32's goals), last, with nothing else running.
# NO_TESTS=1, NO_MULTI=1, NO_STARTUP=1, NO_INSTALL=1 leave steps out; SUITE=cpu-smoke tries the hosts rounds
# on a CPU machine. Logs in $V, packed into $OUT/v12.tar.gz when OUT is set.
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
begin v12
[ -z "$NO_INSTALL" ] && install_wheels
gpu_facts
W=$(mktemp -d); cd "$W" || exit 1
[ -z "$NO_TESTS" ] && step gpu-tests 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
hosts() {  # hosts NAME SUITE HOSTLIST TEMPLATE [controller args...]
  local name=$1 suite=$2 hostlist=$3 template=$4; shift 4; local t0=$SECONDS
  watch_ps "$name-ps.txt" 15 & local w=$!
  timeout 240 clustercheck run "$suite" --launcher hosts --hosts "$hostlist" --host-command "$template" \
    --timings --out "$W/$name" "$@" > "$V/$name.txt" 2>&1; local rc=$?
  kill $w 2>/dev/null
  echo "== $name rc=$rc in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"
  cp "$W/$name/latest/run.jsonl" "$V/$name-run.jsonl" 2>/dev/null
  ls "$W/$name"/latest/ > "$V/$name-files.txt" 2>&1
}
for i in $(seq "${ROUNDS:-3}"); do hosts "hosts-$i" "${SUITE:-gpu-smoke}" localhost '{python}'; done
if [ -z "$NO_MULTI" ]; then
  build_nccl
  if [ -e /tmp/nccl/build/lib/libnccl.so.2 ]; then
    T='env LD_PRELOAD=/tmp/nccl/build/lib/libnccl.so.2 NCCL_MULTI_RANK_GPU_ENABLE=1 {python}'
    for i in $(seq "${MULTI_ROUNDS:-2}"); do
      hosts "multi-$i" "$R/benchmarks/gpu/two-agents.yaml" 'node-[0-1]' "$T" --store-addr 127.0.0.1 \
        --expect fabric_gbps=100 --nccl-log init
    done
  fi
fi
[ -z "$NO_STARTUP" ] && step startup 300 python3 "$R/benchmarks/gpu/startup.py" --rounds 3
cat "$V/steps.txt"
grep -h "GPU0 h2d\|GPU0 d2h\|== \|passed\|failed\|error\|in all\|pool . started\|agents joined\|busbw\|not judged" \
  "$V"/hosts-?.txt "$V"/multi-?.txt 2>/dev/null | grep -v "^ *$" | tail -60
tail -5 "$V/gpu-tests.txt" 2>/dev/null; tail -12 "$V/startup.txt" 2>/dev/null
