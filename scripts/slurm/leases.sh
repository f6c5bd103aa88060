# Leases: test sessions share a cluster that the first one's `acquire` started.
# Sourced by local-slurm.sh and two-node-slurm.sh, which define before sourcing it:
#   dir (the state folder), conf, self (the script's own path), running, start,
#   stop_cluster (stop it and remove what it made) and bad_input (a usage error, exit 2).
# Each session's lease is its PID and that process's start time, so a reused PID never
# counts. The last release stops a cluster an acquire started; a detached reaper stops
# it too once no leased process is alive (a session SIGKILLed before its release, as a
# CI timeout does), so its daemons never outlive every session. A cluster started by
# hand (`start`) is never stopped by a release.
# shellcheck shell=bash disable=SC2154 # dir, conf and self come from the sourcing script

started_mark=$dir/started-by-acquire

proc_start() { # pid: its start time (jiffies since boot), empty when it is gone
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    # shellcheck disable=SC2086 # split the fields after the command name on purpose
    set -- ${stat##*) }
    echo "${20}"
}

live_leases() { # prunes leases of ended processes; prints how many remain
    local lease count=0
    for lease in "$dir"/leases/*; do
        [[ -e $lease ]] || continue
        if [[ $(proc_start "${lease##*/}") == "$(cat "$lease")" ]]; then
            count=$((count + 1))
        else
            rm -f "$lease"
        fi
    done
    echo "$count"
}

acquire() { # pid
    if ! [[ ${1:-} =~ ^[0-9]+$ ]] || [[ -z $(proc_start "$1") ]]; then
        bad_input "acquire needs the PID of a running process, got '${1:-}'"
    fi
    if ! running; then
        start >/dev/null
        touch "$started_mark"
        # 9>&-: the reaper must not hold the lock this acquire holds.
        setsid "$self" reap </dev/null >/dev/null 2>&1 9>&- &
    fi
    mkdir -p "$dir/leases"
    proc_start "$1" >"$dir/leases/$1"
    echo "export SLURM_CONF=$conf"
}

release() { # pid
    [[ ${1:-} =~ ^[0-9]+$ ]] || bad_input "release needs a PID, got '${1:-}'"
    rm -f "$dir/leases/$1"
    if [[ -e $started_mark ]] && [[ $(live_leases) == 0 ]]; then
        stop_cluster >/dev/null
        # A session's own cluster goes whole: its state folder too (its tests collected
        # what they needed from the logs), so a run leaves nothing in the temp dir.
        rm -rf "$dir"
    fi
}

reap() { # every 2 s: once no lease is live, stop the cluster an acquire started
    while sleep 2; do
        [[ -e $started_mark ]] || return 0 # released and removed, or taken over by hand
        exec 9>"$dir/lock"
        flock 9
        if [[ -e $started_mark ]] && [[ $(live_leases) == 0 ]]; then
            stop_cluster >/dev/null
            rm -rf "$dir"
            return 0
        fi
        exec 9>&-
    done
}

locked() { # command...: run it holding the state folder's lock
    mkdir -p "$dir"
    exec 9>"$dir/lock"
    flock 9
    "$@"
}
