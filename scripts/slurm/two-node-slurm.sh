#!/usr/bin/env bash
# A real two-node SLURM cluster on this one machine: each host is a Linux network
# namespace (its own interface, address, hostname and /etc/hosts), joined by a bridge.
# A controller namespace runs slurmctld; node1 and node2 each run slurmd. Jobs that span
# both nodes talk over the bridge exactly as they would over a cluster's network, so
# rendezvous, interface choice and a node lost mid-job can be tested for real.
# Needs root (ip netns), iproute2's ip, util-linux's unshare and Debian's slurm-wlm.
#
#   scripts/slurm/two-node-slurm.sh start          # idempotent; prints `export SLURM_CONF=...`
#   scripts/slurm/two-node-slurm.sh status         # exit 0 when the controller answers and both nodes are up
#   scripts/slurm/two-node-slurm.sh env            # the export line for a running cluster
#   scripts/slurm/two-node-slurm.sh stop           # removes every daemon, namespace, link and file it made
#   scripts/slurm/two-node-slurm.sh paths          # dir=, tag=, net= ... (nothing started)
#   scripts/slurm/two-node-slurm.sh kill-node N    # node N dies: its link is cut, then every
#                                                  # process in its namespace is SIGKILLed
#   scripts/slurm/two-node-slurm.sh revive-node N  # link back up, slurmd again, node back in service
#   scripts/slurm/two-node-slurm.sh acquire PID / release PID   # as in local-slurm.sh
#
# Network: a /24 from 198.18.0.0/15 (the range set aside for benchmarking, RFC 2544):
# .1 is this machine's end of the bridge (where sbatch, squeue and srun are run from),
# .2 the controller "ctl", .11 "node1", .12 "node2". Inside every namespace the interface
# is called rgnet0 (so GLOO_SOCKET_IFNAME=rgnet0 holds on every node, as ib0 or hsn0 does
# on a real cluster). No default route, no NAT, forwarding untouched: nothing but these
# addresses can be reached from the nodes. The filesystem is shared, as a cluster's
# shared filesystem is.
#
# Everything is keyed to this checkout and user, so checkouts never collide: the state
# folder (${TMPDIR:-/tmp}/rankgate-slurm2-<uid>-<tag>), the namespaces (rankgate-<tag>-*),
# the links (rg<tag>*), /etc/netns/rankgate-<tag>-* (each host's /etc/hosts), and the
# subnet (derived from the tag; the next free /24 when another cluster holds it). `start` first sweeps whatever a run that died left under this tag;
# `stop` removes all of it. Daemon ports are SLURM's defaults, private to the namespaces.
#
# Settings (environment):
#   RANKGATE_SLURM2_DIR   state, config and logs
#   RANKGATE_SLURM2_CPUS  CPUs each node offers (default 2)
set -euo pipefail

checkout=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
key=$(printf '%s:%s' "$(id -u)" "$checkout" | cksum | cut -d' ' -f1)
tag=$(printf %08x "$key")
dir=${RANKGATE_SLURM2_DIR:-${TMPDIR:-/tmp}/rankgate-slurm2-$(id -u)-$tag}
cpus=${RANKGATE_SLURM2_CPUS:-2}
conf=$dir/slurm.conf
prefix=rankgate-$tag
bridge=rg${tag}b
ifname=rgnet0
hosts=(ctl node1 node2)
partition=debug

die() { echo "two-node-slurm: $*" >&2; exit 1; }
bad_input() { echo "two-node-slurm: $*" >&2; exit 2; }

ns_of() { echo "$prefix-$1"; }                                       # host -> namespace
veth_of() { case $1 in ctl) echo "rg${tag}c" ;; *) echo "rg${tag}${1#node}" ;; esac; }
host_part() { case $1 in ctl) echo 2 ;; node1) echo 11 ;; node2) echo 12 ;; esac; }

net() { # the /24 this cluster uses, as "198.A.B" (empty when none is chosen yet)
    cat "$dir/net" 2>/dev/null || true
}

addr_of() { echo "$(net).$(host_part "$1")"; }

choose_net() { # the first /24 from the tag's own onward that no interface here holds
    local i index a b
    for i in $(seq 0 511); do
        index=$(((key + i) % 512))
        a=$((18 + index / 256)) b=$((index % 256))
        if ! ip -4 -o addr show | grep -q " inet 198\.$a\.$b\."; then
            echo "198.$a.$b" >"$dir/net"
            return 0
        fi
    done
    die "every /24 of 198.18.0.0/15 is in use on this machine"
}

in_ns() { # host command...: run it on that host (its network, hostname and /etc/hosts)
    local host=$1 ns
    ns=$(ns_of "$1")
    shift
    # Not `ip netns exec`: it mounts a fresh /sys, which hides /sys/fs/cgroup, and slurmd
    # will not start without it. A private mount namespace carries the host's /etc/hosts;
    # its own UTS namespace its name, which slurmctld and torchrun read.
    # shellcheck disable=SC2016 # the inner shell expands these, not this one
    nsenter --net="/run/netns/$ns" unshare --mount --uts --propagation private -- \
        sh -c 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"' \
        "/etc/netns/$ns/hosts" "$host" "$@"
}

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

nodes_ready() {
    local states
    states=$(SLURM_CONF=$conf sinfo -h -N -o '%N %T' 2>/dev/null) || return 1
    for node in node1 node2; do
        # completing: a job just ended there; the node is up (a restart would kill the
        # cluster under whoever else leased it)
        grep -Eq "^$node (idle|mixed|allocated|completing)" <<<"$states" || return 1
    done
}

running() {
    [[ -n $(net) ]] && pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/node1/slurmd.pid" \
        && pid_alive "$dir/node2/slurmd.pid" \
        && SLURM_CONF=$conf scontrol ping >/dev/null 2>&1 && nodes_ready
}

write_conf() {
    local mem
    # Both nodes share this machine's memory: give each a third of it. SLURM wants MB.
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 / 3}' /proc/meminfo)
    mkdir -p "$dir/state" "$dir/node1" "$dir/node2"
    cat >"$conf" <<EOF
# Written by scripts/slurm/two-node-slurm.sh; rewritten on every start.
ClusterName=rankgate2
SlurmctldHost=ctl($(addr_of ctl))
SlurmUser=root
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
# A node that died and registers again returns to service by itself (revive-node).
ReturnToService=2
KillWait=2
OverTimeLimit=0
MinJobAge=600
InactiveLimit=0
MessageTimeout=10
# A node that stops answering is declared DOWN (its jobs NODE_FAIL) after this many
# seconds: longer than the tests' own hang timeouts, so the surviving ranks end first.
SlurmdTimeout=30
SlurmdParameters=config_overrides
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/%n/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/%n/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=node1 NodeHostname=node1 NodeAddr=$(addr_of node1) CPUs=$cpus RealMemory=$mem State=UNKNOWN
NodeName=node2 NodeHostname=node2 NodeAddr=$(addr_of node2) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$partition Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
EOF
}

write_hosts() { # every namespace resolves the cluster's names, as a site's DNS would
    local host
    for host in "${hosts[@]}"; do
        mkdir -p "/etc/netns/$(ns_of "$host")"
        {
            echo "127.0.0.1 localhost"
            for other in "${hosts[@]}"; do echo "$(addr_of "$other") $other"; done
        } >"/etc/netns/$(ns_of "$host")/hosts"
    done
}

make_network() {
    local host ns veth
    ip link add "$bridge" type bridge
    ip addr add "$(net).1/24" dev "$bridge"
    ip link set "$bridge" up
    for host in "${hosts[@]}"; do
        ns=$(ns_of "$host") veth=$(veth_of "$host")
        ip netns add "$ns"
        ip link add "$veth" type veth peer name "$ifname" netns "$ns"
        ip link set "$veth" master "$bridge" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(addr_of "$host")/24" dev "$ifname"
        ip -n "$ns" link set "$ifname" up
    done
}

start_slurmd() { # node
    mkdir -p "$dir/$1/spool"
    in_ns "$1" slurmd -N "$1" -f "$conf" || die "slurmd did not start on $1: see $dir/$1/slurmd.log"
}

wait_ready() {
    local i
    for i in $(seq 1 300); do
        running && return 0
        sleep 0.1
    done
    tail -n 20 "$dir/slurmctld.log" "$dir"/node*/slurmd.log >&2 || true
    die "the nodes did not come up within 30 s (logs above, in $dir)"
}

keep_last_logs() { # the previous run's logs become *.log.old: a new run's are its own
    local log
    for log in "$dir/slurmctld.log" "$dir"/node*/slurmd.log; do
        [[ -e $log ]] && mv -f "$log" "$log.old"
    done
    return 0
}

start() {
    [[ $(id -u) == 0 ]] || die "needs root to make network namespaces (ip netns add); run it as root"
    local tool
    for tool in slurmctld slurmd sbatch ip unshare nsenter; do
        command -v "$tool" >/dev/null \
            || die "$tool not found: apt-get install slurm-wlm iproute2 util-linux"
    done
    if running; then
        echo "export SLURM_CONF=$conf"
        return 0
    fi
    sweep >/dev/null
    mkdir -p "$dir"
    keep_last_logs
    choose_net
    write_conf
    write_hosts
    make_network
    # -c: a clean state (no jobs from an earlier run); -i: ignore a dead run's state files.
    in_ns ctl slurmctld -c -i -f "$conf" || die "slurmctld did not start: see $dir/slurmctld.log"
    start_slurmd node1
    start_slurmd node2
    wait_ready
    echo "export SLURM_CONF=$conf"
}

kill_ns_processes() { # namespace: TERM, then KILL what is left
    local pids i
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    [[ -n $pids ]] || return 0
    # shellcheck disable=SC2086 # one pid a word
    kill -TERM $pids 2>/dev/null || true
    for i in $(seq 1 30); do
        [[ -z $(ip netns pids "$1" 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    pids=$(ip netns pids "$1" 2>/dev/null) || return 0
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
}

sweep() { # remove everything under this tag, whoever left it
    local ns link
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-" || true); do
        kill_ns_processes "$ns"
        ip netns del "$ns" 2>/dev/null || true
    done
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
        | grep "^rg$tag" || true); do
        ip link del "$link" 2>/dev/null || true
    done
    rm -rf /etc/netns/"$prefix"-*
    rm -f "$dir/slurmctld.pid" "$dir"/node*/slurmd.pid "$dir/net"
    echo "two-node-slurm: stopped ($dir)"
}

kill_node() { # node: the link first (no FIN or RST reaches the peers), then every process
    [[ ${1:-} == node1 || ${1:-} == node2 ]] || bad_input "kill-node needs node1 or node2, got '${1:-}'"
    ip netns list | grep -q "^$(ns_of "$1")\b" || die "$1 is not running (start first)"
    ip link set "$(veth_of "$1")" down
    local pids
    pids=$(ip netns pids "$(ns_of "$1")")
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill -KILL $pids
    echo "two-node-slurm: $1 killed (link cut, $(wc -w <<<"$pids") processes)"
}

revive_node() { # node
    [[ ${1:-} == node1 || ${1:-} == node2 ]] || bad_input "revive-node needs node1 or node2, got '${1:-}'"
    ip link set "$(veth_of "$1")" up
    kill_ns_processes "$(ns_of "$1")"
    start_slurmd "$1"
    # ReturnToService=2 brings a DOWN node back when it registers; a node the
    # controller had not yet noticed as gone is just idle again.
    SLURM_CONF=$conf scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
    wait_ready
    echo "two-node-slurm: $1 back"
}

# --- leases (scripts/slurm/leases.sh): test sessions share a cluster safely --------
self=${BASH_SOURCE[0]}
stop_cluster() { sweep; }
# shellcheck source=scripts/slurm/leases.sh
. "$(dirname "${BASH_SOURCE[0]}")/leases.sh"

case ${1:-} in
    start) locked start; rm -f "$started_mark" ;;
    stop) locked sweep; rm -f "$started_mark" ;;
    status) running ;;
    env) running || die "not running (start it first)"; echo "export SLURM_CONF=$conf" ;;
    paths)
        echo "dir=$dir"; echo "tag=$tag"; echo "net=$(net)"; echo "bridge=$bridge"
        echo "ifname=$ifname"; for h in "${hosts[@]}"; do echo "$h=$(ns_of "$h")"; done ;;
    kill-node) locked kill_node "${2:-}" ;;
    revive-node) locked revive_node "${2:-}" ;;
    acquire) locked acquire "${2:-}" ;;
    # A second lease of the same session may come after the first one removed the folder.
    release) [[ -d $dir ]] || exit 0; locked release "${2:-}" ;;
    reap) reap ;; # started by acquire, detached
    *) bad_input "usage: $0 start|stop|status|env|paths|kill-node N|revive-node N|acquire PID|release PID" ;;
esac
