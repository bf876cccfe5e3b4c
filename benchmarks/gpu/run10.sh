#!/usr/bin/env bash
# GPU call 10 (2026-11-27), after the agent started forking its zygote (run/agent.py `warm`) and the zygote
# moved to run/zygote_serve.py. The wheel installed as run6.sh does, then from an empty directory:
#   tests/gpu;
#   gpu-smoke under --launcher join with one agent, ROUNDS times (default 3), the processes listed every
#   2 s: the agent's zygote (comm cc-zygote) must be the agent's child, and the NCCL rank the zygote's;
#   NCCL 2.30 built from .gpu/nccl (../shared/gpu-multirank.md), then two agents (node-0, node-1) on this
#   one GPU with that build preloaded and NCCL_MULTI_RANK_GPU_ENABLE=1, running benchmarks/gpu/two-agents.yaml:
#   one NCCL communicator across ranks forked from two agent-forked zygotes;
#   benchmarks/gpu/startup.py --rounds 3 (issue 32's goals), last, with nothing else running.
# SMOKE=1 adds a plain local gpu-smoke run after the join rounds (torch's own NCCL: the control for the
# NCCL version the records name). NO_TESTS=1 leaves out tests/gpu; NO_MULTI=1 the NCCL build and the two-agent run; NO_INSTALL=1 the install;
# NO_STARTUP=1 startup.py; MULTI_ROUNDS=N two-agent runs (default 2). SUITE=cpu-smoke (with NO_MULTI=1 NO_STARTUP=1) tries the join rounds on a CPU machine.
# Logs in $V, packed into $OUT/v10.tar.gz when OUT is set.
V=${V:-/tmp/v10}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
pack_on_exit v10
[ -z "$NO_INSTALL" ] && install_wheels
step facts 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; nproc;
  python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version())"'
W=$(mktemp -d); cd "$W" || exit 1
[ -z "$NO_TESTS" ] && step gpu-tests 240 python3 -m pytest -m gpu -v -rs -p no:cacheprovider "$R/tests/gpu"
watch_ps() { for _ in $(seq 12); do sleep 2; echo "-- $(date +%T.%N)"; ps -eo pid,ppid,pgid,comm,args | grep -E "[c]lustercheck|[c]c-zygote|[p]ython3"; done >> "$V/$1" 2>&1; }
join() {  # join NAME SUITE NODES [controller args...]; agents get $AGENT_ENV
  local name=$1 suite=$2 nodes=$3; shift 3
  local port; port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local t0=$SECONDS pids=()
  CLUSTERCHECK_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))') || return
  export CLUSTERCHECK_TOKEN
  timeout 240 clustercheck run "$suite" --launcher join --nodes "$nodes" --store-addr "127.0.0.1:$port" --timings \
    --out "$W/$name" "$@" >> "$V/$name.txt" 2>&1 & local ctl=$!
  for i in $(seq 0 $((nodes - 1))); do
    env $AGENT_ENV JOB_COMPLETION_INDEX=$i NODE_NAME=node-$i CLUSTERCHECK_CONTROLLER="127.0.0.1:$port" \
      timeout 240 clustercheck agent >> "$V/$name-agent$i.txt" 2>&1 & pids+=($!)
  done
  watch_ps "$name-ps.txt" & local w=$!
  wait $ctl; local rc=$?; local arcs=""
  for p in "${pids[@]}"; do wait "$p"; arcs="$arcs $?"; done
  kill $w 2>/dev/null; unset CLUSTERCHECK_TOKEN
  echo "== $name rc=$rc (agents rc$arcs) in $((SECONDS - t0)) s" | tee -a "$V/$name.txt" >> "$V/steps.txt"
  cp "$W/$name/latest/run.jsonl" "$V/$name-run.jsonl" 2>/dev/null
}
for i in $(seq "${ROUNDS:-3}"); do join "join-$i" "${SUITE:-gpu-smoke}" 1; done
if [ -n "$SMOKE" ]; then
  step smoke 120 clustercheck run gpu-smoke --timings --out "$W/s"; cp "$W/s/latest/run.jsonl" "$V/smoke-run.jsonl"
fi
if [ -z "$NO_MULTI" ]; then
  build_nccl
  if [ -e /tmp/nccl/build/lib/libnccl.so.2 ]; then
    AGENT_ENV="LD_PRELOAD=/tmp/nccl/build/lib/libnccl.so.2 NCCL_MULTI_RANK_GPU_ENABLE=1"
    for i in $(seq "${MULTI_ROUNDS:-2}"); do join "multi-$i" "$R/benchmarks/gpu/two-agents.yaml" 2 --expect fabric_gbps=100 --nccl-log init; done
    AGENT_ENV=""
  fi
fi
[ -z "$NO_STARTUP" ] && step startup 240 python3 "$R/benchmarks/gpu/startup.py" --rounds 3
cat "$V/steps.txt"
grep -h "GPU0 h2d\|GPU0 d2h\|== \|passed\|failed\|error\|in all\|pool . started" "$V"/join-*.txt "$V"/multi-?.txt 2>/dev/null | grep -v "^ *$" | tail -60
tail -5 "$V/gpu-tests.txt" 2>/dev/null; tail -12 "$V/startup.txt"
