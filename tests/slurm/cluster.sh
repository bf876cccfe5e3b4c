#!/usr/bin/env bash
# Start/stop a REAL, self-contained Slurm cluster (1 slurmctld + 3 slurmd +
# its own munged) on this single machine, for clustercheck tests.
#
#   cluster.sh install            apt-get install slurm-wlm munge (idempotent)
#   cluster.sh start  [DIR]       build DIR (default /tmp/cc-slurm), start daemons,
#                                 wait for ccnode[1-3] idle, print DIR/env.sh
#   cluster.sh stop   [DIR]       stop every daemon via the PID files in DIR
#   cluster.sh status [DIR]       sinfo of that cluster
#
# Nothing is exported globally; callers do `source DIR/env.sh`.
# Processes are only ever killed by PID (from our PID files, after checking
# that /proc/PID/cmdline or /proc/PID/environ refers to DIR), never by name.
set -euo pipefail

DEFAULT_DIR=/tmp/cc-slurm
NODES=(ccnode1 ccnode2 ccnode3)
CPUS_PER_NODE=${CC_SLURM_CPUS:-4}
MEM_PER_NODE=${CC_SLURM_MEM:-2048}
START_TIMEOUT=${CC_SLURM_TIMEOUT:-60}
MARKER=.cc-slurm

log() { echo "[cc-slurm] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

find_bin() {
    local b=$1
    if command -v "$b" >/dev/null 2>&1; then command -v "$b"
    elif [[ -x /usr/sbin/$b ]]; then echo "/usr/sbin/$b"
    else return 1
    fi
}

cmd_install() {
    if find_bin slurmctld >/dev/null && find_bin slurmd >/dev/null \
        && find_bin munged >/dev/null && command -v srun >/dev/null; then
        log "slurm and munge already installed"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || die "install needs root"
    log "installing slurm-wlm munge ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq slurm-wlm munge >/dev/null
    # The Debian packages may try to start the system-wide daemons (only when
    # an init system is running). We don't use them, but we don't touch them
    # either.
    log "installed: $(find_bin slurmctld) $(find_bin munged)"
}

# Absolute, normalised state dir (created only when $2 == create).
resolve_dir() {
    local d=${1:-$DEFAULT_DIR}
    [[ -n $d && $d != / ]] || die "refusing state dir '$d'"
    if [[ ${2:-} == create ]]; then mkdir -p "$d"; fi
    if [[ -d $d ]]; then (cd "$d" && pwd -P); else echo "$d"; fi
}

# Print N distinct free TCP ports on 127.0.0.1.
free_ports() {
    python3 - "$1" <<'EOF'
import socket, sys
n = int(sys.argv[1]); socks = []; ports = []
while len(ports) < n:
    s = socket.socket(); s.bind(("", 0)); p = s.getsockname()[1]
    socks.append(s)
    # stay away from the default slurm ports
    if p not in (6817, 6818, 6819) and p not in ports:
        ports.append(p)
print(" ".join(map(str, ports)))
EOF
}
free_ports_fallback() {  # no python3: random ports nobody answers on
    local n=$1 p out=()
    while ((${#out[@]} < n)); do
        p=$((20000 + RANDOM % 40000))
        [[ " ${out[*]} " == *" $p "* ]] && continue
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        out+=("$p")
    done
    echo "${out[*]}"
}

# List of "name:pidfile" for all daemons of DIR (order = stop order).
pidfiles() {
    local dir=$1 n
    for n in "${NODES[@]}"; do echo "slurmd-$n:$dir/run/slurmd-$n.pid"; done
    echo "slurmctld:$dir/run/slurmctld.pid"
    echo "munged:$dir/run/munged.pid"
}

pid_alive() {
    local pid=$1
    [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || return 1
    # zombies are not really running
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

# Is PID alive and one of ours? Ours = a slurm/munge daemon whose command
# line mentions DIR/, or any process carrying CC_SLURM_DIR=DIR in its
# environment (set on every daemon we start; slurmstepd inherits it).
pid_is_ours() {
    local pid=$1 dir=$2 comm
    pid_alive "$pid" || return 1
    if tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qxF -- "CC_SLURM_DIR=$dir"; then
        return 0
    fi
    comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
    case $comm in slurmd|slurmctld|slurmstepd|munged) ;; *) return 1 ;; esac
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/"
}

# All live processes that belong to DIR (see pid_is_ours).
our_pids() {
    local dir=$1 p pid
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
        if pid_is_ours "$pid" "$dir"; then echo "$pid"; fi
    done
}

# PIDs of all descendants of PID (children first-level first).
descendants() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2; order[NR] = $1 }
        END {
            want[root] = 1; changed = 1
            while (changed) {
                changed = 0
                for (i = 1; i <= NR; i++) {
                    p = order[i]
                    if (!(p in want) && (parent[p] in want)) { want[p] = 1; changed = 1; print p }
                }
            }
        }'
}

running_daemons() {
    local dir=$1 entry name pf pid
    while IFS= read -r entry; do
        name=${entry%%:*}; pf=${entry#*:}
        [[ -f $pf ]] || continue
        pid=$(tr -dc '0-9' <"$pf")
        if pid_is_ours "$pid" "$dir"; then echo "$name:$pid"; fi
    done < <(pidfiles "$dir")
}

write_config() {
    local dir=$1 ctld_port=$2; shift 2
    local ports=("$@") host
    host=$(hostname -s)
    cat >"$dir/slurm.conf" <<EOF
# Generated by tests/slurm/cluster.sh -- self-contained test cluster.
ClusterName=ccslurm
SlurmctldHost=${host}(127.0.0.1)
SlurmctldPort=${ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${dir}/munge/munge.socket

StateSaveLocation=${dir}/state
SlurmctldPidFile=${dir}/run/slurmctld.pid
SlurmctldLogFile=${dir}/log/slurmctld.log
SlurmdSpoolDir=${dir}/spool/%n
SlurmdPidFile=${dir}/run/slurmd-%n.pid
SlurmdLogFile=${dir}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

# Declared resources are trusted even though the machine has fewer cores.
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
# Per-node task environment, as a site's TaskProlog sets it: DIR/node-env/<node> lines KEY=VALUE.
# Tests use it to give one node a misconfiguration (e.g. NCCL_P2P_DISABLE=1) that a probe must find.
TaskProlog=${dir}/task_prolog.sh
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=30
Waittime=0
# A switch tree (topology.conf beside this file): ccnode1-2 under leaf ccleaf1, ccnode3 under ccleaf2,
# both under ccspine. "clustercheck run --topology slurm" reads it back through "scontrol show topology".
TopologyPlugin=topology/tree

NodeName=ccnode[1-3] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[${ports[0]},${ports[1]},${ports[2]}] CPUs=${CPUS_PER_NODE} Sockets=1 CoresPerSocket=${CPUS_PER_NODE} ThreadsPerCore=1 RealMemory=${MEM_PER_NODE} State=UNKNOWN
PartitionName=debug Nodes=ccnode[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    cat >"$dir/topology.conf" <<EOF
SwitchName=ccleaf1 Nodes=ccnode[1-2]
SwitchName=ccleaf2 Nodes=ccnode3
SwitchName=ccspine Switches=ccleaf[1-2]
EOF
}

print_logs() {
    local dir=$1 f
    for f in "$dir"/log/*.log; do
        [[ -f $f ]] || continue
        echo "===== $f (last 40 lines) =====" >&2
        tail -n 40 "$f" >&2 || true
    done
}

# Print the logs, tear down what was started (unless CC_SLURM_KEEP_ON_FAIL=1)
# and exit 1.
fail_start() {
    local dir=$1; shift
    print_logs "$dir"
    log "ERROR: $*"
    if [[ ${CC_SLURM_KEEP_ON_FAIL:-0} != 1 ]]; then
        cmd_stop "$dir" || true
    fi
    exit 1
}

cmd_start() {
    local dir slurmctld slurmd munged mungekey
    dir=$(resolve_dir "${1:-}" create)
    slurmctld=$(find_bin slurmctld) || die "slurmctld not found (run: $0 install)"
    slurmd=$(find_bin slurmd)       || die "slurmd not found (run: $0 install)"
    munged=$(find_bin munged)       || die "munged not found (run: $0 install)"
    mungekey=$(find_bin mungekey || true)
    [[ $(id -u) -eq 0 ]] || die "start needs root (slurmd runs as root)"

    if [[ -n $(running_daemons "$dir") ]]; then
        die "cluster in $dir already running:" "$(running_daemons "$dir" | tr '\n' ' ')"
    fi
    if [[ -n $(ls -A "$dir") && ! -f $dir/$MARKER ]]; then
        die "$dir is not empty and not a cc-slurm dir; refusing to use it"
    fi
    # Fresh state every time (only inside a dir we created).
    rm -rf "${dir:?}"/{munge,state,spool,log,run,slurm.conf,env.sh,task_prolog.sh,node-env}
    mkdir -p "$dir"/{munge,state,log,run} "${NODES[@]/#/$dir/spool/}"
    touch "$dir/$MARKER"
    # munged insists that its dirs are not group/world writable.
    chmod 0755 "$dir"
    chmod 0755 "$dir/munge"  # 0700 would make the socket unusable for non-root clients

    # --- munge -----------------------------------------------------------
    if [[ -n $mungekey ]]; then
        "$mungekey" --create --keyfile="$dir/munge/munge.key" --force >/dev/null
    else
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
    fi
    chmod 0400 "$dir/munge/munge.key"
    log "starting munged"
    CC_SLURM_DIR=$dir "$munged" --force \
        --socket="$dir/munge/munge.socket" \
        --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/run/munged.pid" \
        --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" \
        || { fail_start "$dir" "munged failed to start"; }
    if command -v munge >/dev/null; then
        munge -n --socket="$dir/munge/munge.socket" \
            | unmunge --socket="$dir/munge/munge.socket" >/dev/null \
            || { fail_start "$dir" "munge self-test failed"; }
    fi

    # --- slurm.conf + env.sh ---------------------------------------------
    local ports
    if command -v python3 >/dev/null; then
        read -r -a ports <<<"$(free_ports 4)"
    else
        read -r -a ports <<<"$(free_ports_fallback 4)"
    fi
    write_config "$dir" "${ports[0]}" "${ports[@]:1}"
    mkdir -p "$dir/node-env"
    cat >"$dir/task_prolog.sh" <<PROLOG
#!/bin/sh
# Slurm TaskProlog: every "export X=Y" line printed here lands in the task's environment.
f="$dir/node-env/\$SLURMD_NODENAME"
[ -f "\$f" ] && sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=\(.*\)\$/export \1=\2/p' "\$f"
exit 0
PROLOG
    chmod 755 "$dir/task_prolog.sh"
    cat >"$dir/env.sh" <<EOF
# source this file to talk to the cc-slurm test cluster in $dir
export SLURM_CONF=$dir/slurm.conf
export CC_SLURM_HOME=$dir
EOF

    # --- slurmctld + slurmd x3 ------------------------------------------
    # CC_SLURM_DIR marks the daemons (and slurmstepd, which inherits the
    # environment) as ours, so `stop` can find strays without pkill-by-name.
    log "starting slurmctld (port ${ports[0]})"
    CC_SLURM_DIR=$dir SLURM_CONF=$dir/slurm.conf \
        "$slurmctld" -f "$dir/slurm.conf" -c -i \
        || { fail_start "$dir" "slurmctld failed to start"; }
    local n
    for n in "${NODES[@]}"; do
        log "starting slurmd -N $n"
        CC_SLURM_DIR=$dir SLURM_CONF=$dir/slurm.conf \
            "$slurmd" -f "$dir/slurm.conf" -N "$n" \
            || { fail_start "$dir" "slurmd $n failed to start"; }
    done

    # --- wait for all nodes idle -------------------------------------------
    local deadline=$((SECONDS + START_TIMEOUT)) out nidle
    while :; do
        out=$(SLURM_CONF=$dir/slurm.conf sinfo -h -N -p debug -o '%N %t' 2>/dev/null || true)
        nidle=$(awk '$2 == "idle"' <<<"$out" | sort -u | wc -l)
        [[ $nidle -eq ${#NODES[@]} ]] && break
        if ((SECONDS >= deadline)); then
            log "nodes not idle after ${START_TIMEOUT}s; sinfo:"
            echo "$out" >&2
            fail_start "$dir" "cluster did not come up"
        fi
        sleep 1
    done
    log "cluster up: $(SLURM_CONF=$dir/slurm.conf sinfo -h -o '%P %D %t %N' | tr '\n' ' ')"
    echo "$dir/env.sh"
}

# SIGTERM a PID (after checking it is ours), wait, SIGKILL if needed.
kill_wait() {
    local name=$1 pid=$2 dir=$3 i
    pid_is_ours "$pid" "$dir" || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        pid_is_ours "$pid" "$dir" || return 0
        sleep 0.1
    done
    log "$name (pid $pid) ignored SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        pid_is_ours "$pid" "$dir" || return 0
        sleep 0.1
    done
    log "WARNING: $name (pid $pid) still alive"
}

cmd_stop() {
    local dir entry name pf pid
    dir=$(resolve_dir "${1:-}")
    [[ -f $dir/$MARKER ]] || { log "$dir is not a cc-slurm dir; nothing to stop"; return 0; }
    [[ $(id -u) -eq 0 ]] || die "stop needs root (the daemons run as root)"

    # Cancel running jobs so slurmd/slurmstepd can clean up their tasks.
    if [[ -f $dir/slurm.conf ]] && [[ -n $(running_daemons "$dir" | grep '^slurmctld:' || true) ]]; then
        local jobs
        jobs=$(SLURM_CONF=$dir/slurm.conf timeout 10 squeue -h -o %i 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            log "cancelling jobs: ${jobs//$'\n'/ }"
            # shellcheck disable=SC2086
            SLURM_CONF=$dir/slurm.conf timeout 10 scancel $jobs 2>/dev/null || true
            sleep 2
        fi
    fi

    while IFS= read -r entry; do
        name=${entry%%:*}; pf=${entry#*:}
        [[ -f $pf ]] || continue
        pid=$(tr -dc '0-9' <"$pf")
        [[ -n $pid ]] && kill_wait "$name" "$pid" "$dir"
        rm -f "$pf"
    done < <(pidfiles "$dir")

    # Strays still carrying our marker, e.g. slurmstepd left behind when
    # slurmctld/slurmd died before the job could be cancelled. slurmstepd
    # ignores SIGTERM, so: SIGKILL its task processes (its descendants, found
    # by PID lineage -- they don't carry the marker), then SIGKILL it.
    local strays p c comm
    strays=$(our_pids "$dir" || true)
    for p in $strays; do
        pid_alive "$p" || continue
        comm=$(cat "/proc/$p/comm" 2>/dev/null || true)
        if [[ $comm == slurmstepd ]]; then
            for c in $(descendants "$p"); do
                log "killing task pid $c of stray slurmstepd $p"
                kill -KILL "$c" 2>/dev/null || true
            done
            log "killing stray slurmstepd (pid $p)"
            kill -KILL "$p" 2>/dev/null || true
        fi
        kill_wait "stray $comm" "$p" "$dir"
    done
    strays=$(our_pids "$dir" || true)
    if [[ -n $strays ]]; then
        log "ERROR: processes of $dir still alive:"
        ps -o pid,args -p "$(paste -sd, <<<"$strays")" >&2 || true
        exit 1
    fi
    rm -f "$dir/munge/munge.socket" "$dir/munge/munge.socket.lock"
    log "stopped; no processes of $dir remain"
}

cmd_status() {
    local dir
    dir=$(resolve_dir "${1:-}")
    [[ -f $dir/slurm.conf ]] || die "no cluster config in $dir"
    running_daemons "$dir" | sed 's/^/  daemon /' >&2
    SLURM_CONF=$dir/slurm.conf sinfo
    SLURM_CONF=$dir/slurm.conf sinfo -N -o '%N %t %c %m %E'
}

case ${1:-} in
    install) cmd_install ;;
    start)   cmd_start "${2:-}" ;;
    stop)    cmd_stop "${2:-}" ;;
    status)  cmd_status "${2:-}" ;;
    *) echo "usage: $0 {install|start|stop|status} [DIR]" >&2; exit 2 ;;
esac
