#!/usr/bin/env bash
# A real one-node SLURM cluster on localhost, for the hpc-marked tests and for trying
# `rankgate dispatch` without a cluster. Needs Debian's slurm-wlm (or slurmctld,
# slurmd and slurm-client); run it as root or as the user that should own the jobs.
#
#   scripts/slurm/local-slurm.sh start    # idempotent; prints `export SLURM_CONF=...`
#   scripts/slurm/local-slurm.sh status   # exit 0 when the controller answers and the node is up
#   scripts/slurm/local-slurm.sh env      # the export line for a running cluster
#   scripts/slurm/local-slurm.sh stop     # idempotent; stops both daemons
#   scripts/slurm/local-slurm.sh paths    # prints dir=... and port=... (nothing started)
#
# For test sessions, which share a cluster without stopping one they did not start:
#   scripts/slurm/local-slurm.sh acquire PID  # start unless running; PID now uses it
#   scripts/slurm/local-slurm.sh release PID  # PID is done; the last user of a cluster
#                                             # an `acquire` started stops it
# A cluster started by hand (`start`) is never stopped by `release`. PIDs whose process
# has ended no longer count; once none is live (a session killed before its release),
# a reaper that `acquire` left behind stops the cluster within seconds. Every command
# holds a lock on the state folder.
#
# Settings (environment):
#   RANKGATE_SLURM_DIR   state, config and logs
#   RANKGATE_SLURM_PORT  slurmctld port; slurmd takes the next one
#   RANKGATE_SLURM_CPUS  CPUs the node offers     (default: this machine's, nproc)
# The folder and port default to values derived from this checkout's path and the
# user id (${TMPDIR:-/tmp}/rankgate-slurm-<uid>-<hash>, an even port in 20000-32766),
# so two checkouts or two users on one machine never share a cluster.
#
# The configuration follows ../shared/DESIGN.md: auth/none and cred/none (no munge),
# proctrack/linuxproc and task/none (no cgroups), select/cons_tres, ports away from
# SLURM's defaults so a site SLURM on the same host is left alone. Partitions: debug
# (default) and urgent, whose jobs preempt debug jobs. Accounting is off,
# so sacct has nothing; rankgate's poller uses squeue and scontrol.
set -euo pipefail

checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
key=$(printf '%s:%s' "$(id -u)" "$checkout" | cksum | cut -d' ' -f1)
dir=${RANKGATE_SLURM_DIR:-${TMPDIR:-/tmp}/rankgate-slurm-$(id -u)-$(printf %08x "$key")}
# Below Linux's ephemeral range (32768+), so a client's outgoing port never holds it.
port=${RANKGATE_SLURM_PORT:-$((20000 + key % 6384 * 2))}
cpus=${RANKGATE_SLURM_CPUS:-$(nproc)}
conf=$dir/slurm.conf
node=rankgate-node
partition=debug
urgent=urgent

die() { echo "local-slurm: $*" >&2; exit 1; }
bad_input() { echo "local-slurm: $*" >&2; exit 2; }

pid_alive() { # pidfile
    [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

node_ready() {
    local state
    state=$(SLURM_CONF=$conf sinfo -h -n "$node" -o %T 2>/dev/null | head -n1) || return 1
    # completing: a job just ended there, and the node is up
    [[ $state == idle* || $state == mixed* || $state == allocated* || $state == completing* ]]
}

running() {
    pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid" \
        && SLURM_CONF=$conf scontrol ping >/dev/null 2>&1 && node_ready
}

write_conf() {
    local user mem
    user=$(id -un)
    # Leave a quarter of the memory to the machine; SLURM wants megabytes.
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 3 / 4}' /proc/meminfo)
    mkdir -p "$dir/state" "$dir/spool" "$dir/jobs"
    cat >"$conf" <<EOF
# Written by scripts/slurm/local-slurm.sh; rewritten on every start.
ClusterName=rankgate
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
# Short waits so a test of time limits or cancellation ends in seconds, not minutes.
KillWait=2
OverTimeLimit=0
MinJobAge=600
InactiveLimit=0
MessageTimeout=10
SlurmdTimeout=30
# The node may offer more CPUs than the machine has (RANKGATE_SLURM_CPUS).
SlurmdParameters=config_overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# A job in partition $urgent takes the node from $partition jobs, which end PREEMPTED
# (a real preemption for the tests of that outcome).
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=$node NodeHostname=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$partition Nodes=$node Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName=$urgent Nodes=$node MaxTime=INFINITE State=UP PriorityTier=2
EOF
}

port_taken() { # port: something answers there
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        || die "slurmctld/slurmd not found: apt-get install slurm-wlm (or slurmctld slurmd slurm-client)"
    if running; then
        echo "export SLURM_CONF=$conf"
        return 0
    fi
    stop >/dev/null
    local p
    for p in "$port" $((port + 1)); do
        ! port_taken "$p" || die "port $p is in use by another program; set RANKGATE_SLURM_PORT to a free even port (slurmd takes the next one)"
    done
    write_conf
    # -c: start from a clean state (no jobs left from an earlier run); -i: ignore
    # errors reading the state files of a run that died.
    SLURM_CONF=$conf slurmctld -c -i -f "$conf" || die "slurmctld did not start: see $dir/slurmctld.log"
    SLURM_CONF=$conf slurmd -N "$node" -f "$conf" || die "slurmd did not start: see $dir/slurmd.log"
    local i
    for i in $(seq 1 300); do
        if running; then
            echo "export SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.1
    done
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    die "the node did not come up within 30 s (logs above, in $dir)"
}

stop() {
    local daemon pid i
    for daemon in slurmd slurmctld; do
        pid_alive "$dir/$daemon.pid" || continue
        pid=$(cat "$dir/$daemon.pid")
        # Only a pid that is really this daemon: a stale pidfile may name another process.
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$daemon" ]] || continue
        kill "$pid"
        for i in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    done
    rm -f "$dir/slurmd.pid" "$dir/slurmctld.pid"
    echo "local-slurm: stopped ($dir)"
}

# --- leases: which processes use a cluster that a test session started -----------
self=${BASH_SOURCE[0]}
stop_cluster() { stop; }
# shellcheck source=scripts/slurm/leases.sh
. "$(dirname "${BASH_SOURCE[0]}")/leases.sh"

case ${1:-} in
    start) locked start; rm -f "$started_mark" ;; # by hand: no release may stop it
    stop) locked stop ;;
    status) running ;;
    env) running || die "not running (start it first)"; echo "export SLURM_CONF=$conf" ;;
    paths) echo "dir=$dir"; echo "port=$port" ;;
    acquire) locked acquire "${2:-}" ;;
    # A second lease of the same session may come after the first one removed the folder.
    release) [[ -d $dir ]] || exit 0; locked release "${2:-}" ;;
    reap) reap ;; # started by acquire, detached
    *) bad_input "usage: $0 start|stop|status|env|paths|acquire PID|release PID" ;;
esac
