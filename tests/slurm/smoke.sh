#!/usr/bin/env bash
# Smoke test for cluster.sh: start a 3-node cluster, check salloc/srun,
# drain/resume, stop, and check that no daemon of ours is left.
#   tests/slurm/smoke.sh [DIR]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-/tmp/cc-slurm-smoke}
CLUSTER="$HERE/cluster.sh"

fail() { echo "SMOKE FAIL: $*" >&2; "$CLUSTER" stop "$DIR" || true; exit 1; }
step() { echo; echo "\$ $*"; }

"$CLUSTER" install
env_sh=$("$CLUSTER" start "$DIR")
# shellcheck disable=SC1090
source "$env_sh"

step "salloc -N3 srun -l hostname"
timeout 60 salloc -N3 srun -l hostname | sort

# shellcheck disable=SC2016  # expanded by the job's shell, on purpose
step 'salloc -N3 bash -c "echo \$SLURM_JOB_NODELIST; srun -l printenv SLURMD_NODENAME"'
# shellcheck disable=SC2016
out=$(timeout 60 salloc -N3 bash -c 'echo "NODELIST=$SLURM_JOB_NODELIST"; srun -l printenv SLURMD_NODENAME | sort' 2>/dev/null)
echo "$out"
grep -qx 'NODELIST=ccnode\[1-3\]' <<<"$out" || fail "SLURM_JOB_NODELIST is not ccnode[1-3]"
[[ $(grep -c '^[0-2]: ccnode[1-3]$' <<<"$out") -eq 3 ]] || fail "expected 3 tasks"
[[ $(grep -o 'ccnode[1-3]$' <<<"$out" | sort -u | wc -l) -eq 3 ]] || fail "expected 3 distinct nodes"

step "srun -N3 --ntasks-per-node=2 -l printenv SLURM_PROCID SLURMD_NODENAME"
out=$(timeout 60 srun -N3 --ntasks-per-node=2 -l printenv SLURM_PROCID SLURMD_NODENAME | sort -n)
echo "$out"
per_node=$(grep -o 'ccnode[1-3]$' <<<"$out" | sort | uniq -c | awk '{print $1}' | sort -u | tr '\n' ' ')
[[ $(grep -c 'ccnode' <<<"$out") -eq 6 && $per_node == "2 " ]] || fail "expected 6 tasks, 2 per node"

step 'scontrol update NodeName=ccnode2 State=DRAIN Reason="test"; sinfo'
scontrol update NodeName=ccnode2 State=DRAIN Reason="test"
sinfo
[[ $(sinfo -h -n ccnode2 -o %t) == drain ]] || fail "ccnode2 not drained"
out=$(timeout 60 srun -N2 -l printenv SLURMD_NODENAME | sort)
echo "srun -N2 while ccnode2 drained -> $(echo "$out" | tr '\n' ' ')"
grep -q ccnode2 <<<"$out" && fail "job ran on drained node"

step "scontrol update NodeName=ccnode2 State=RESUME; sinfo"
scontrol update NodeName=ccnode2 State=RESUME
# right after RESUME the node is briefly "idle*" until slurmctld pings it
for _ in $(seq 20); do [[ $(sinfo -h -n ccnode2 -o %t) == idle ]] && break; sleep 0.5; done
sinfo
[[ $(sinfo -h -n ccnode2 -o %t) == idle ]] || fail "ccnode2 not idle after resume"

step "cluster.sh stop $DIR"
"$CLUSTER" stop "$DIR"
if pgrep -af -- "$DIR/"; then fail "processes of $DIR left"; fi
echo "no process of $DIR left"
echo; echo "SMOKE OK"
