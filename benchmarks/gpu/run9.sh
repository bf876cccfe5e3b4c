#!/usr/bin/env bash
# GPU call 9: the launchers on a GPU node (docs/kubernetes.md listed "GPUs and NCCL under the agents" as
# never run). The wheel installed as run6.sh does, then from an empty directory, with SUITE (default
# gpu-smoke):
#   --launcher join with one node agent (`clustercheck agent`, the Indexed Job environment) on this machine:
#   the agent's zygote forks the facts pool (gloo) and the NCCL pool;
#   --launcher hosts with the one-machine template ({python}, no ssh): ranks started afresh by the template.
# ROUNDS=N repeats the join run N times (LOCAL_TOO=1: a local run after each); NO_HOSTS=1 leaves out the hosts run.
# Logs in $V, packed into $OUT/v9.tar.gz when OUT is set. SUITE=cpu-smoke runs the same on a CPU machine.
V=${V:-/tmp/v9}; mkdir -p "$V"
R=$(cd "$(dirname "$0")/../.." && pwd)
SUITE=${SUITE:-gpu-smoke}
# shellcheck source=benchmarks/gpu/step.sh
source "$R/benchmarks/gpu/step.sh"
export PYTHONUNBUFFERED=1
[ -z "$NO_INSTALL" ] && step install 120 python3 -m pip install -q --no-index --no-deps "$R"/.whl/*.whl
W=$(mktemp -d); cd "$W" || exit 1
CLUSTERCHECK_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))'); export CLUSTERCHECK_TOKEN
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for i in $(seq "${ROUNDS:-1}"); do
  t0=$SECONDS
  timeout 180 clustercheck run "$SUITE" --launcher join --nodes 1 --store-addr "127.0.0.1:$PORT" --timings \
    --out "$W/j" >> "$V/join.txt" 2>&1 & ctl=$!
  JOB_COMPLETION_INDEX=0 NODE_NAME=node-0 CLUSTERCHECK_CONTROLLER="127.0.0.1:$PORT" timeout 180 clustercheck agent \
    >> "$V/agent.txt" 2>&1 & agent=$!
  wait $ctl; rc=$?; wait $agent; arc=$?
  echo "== join $i rc=$rc (agent rc=$arc) in $((SECONDS - t0)) s" | tee -a "$V/join.txt" >> "$V/steps.txt"
  [ -n "$LOCAL_TOO" ] && step "local-$i" 120 clustercheck run "$SUITE" --timings --out "$W/l"
done
unset CLUSTERCHECK_TOKEN
[ -z "$NO_HOSTS" ] && step hosts 180 clustercheck run "$SUITE" --launcher hosts --hosts localhost --host-command '{python}' --timings \
  --out "$W/h"
cp "$W"/j/latest/run.jsonl "$V/join-run.jsonl" 2>/dev/null
cp "$W"/h/latest/run.jsonl "$V/hosts-run.jsonl" 2>/dev/null
cat "$V/steps.txt"
[ -n "$OUT" ] && tar -C "$V" -czf "$OUT/v9.tar.gz" .
grep -h "GPU0 h2d\|GPU0 d2h\|== \|passed\|failed" "$V"/join.txt "$V"/local-*.txt "$V"/hosts.txt 2>/dev/null
