#!/usr/bin/env bash
# The shards benchmark as it was run (rankgate at the commit that adds this folder).
# W=/tmp/W here: a private folder (mktemp -d) holding bench/one.toml and bench/two.toml
# (profiles/ beside this file, with /tmp/W in their paths).
# The two-node cluster (as root), held for the whole run by a lease of our own:
#   sleep 7000 & scripts/slurm/two-node-slurm.sh acquire $!
# then export SLURM_CONF as it prints, and after the run: release that PID (kill the sleep).
source .venv/bin/activate   # python with rankgate and torch 2.13.0 (CPU)
run() { # name profile extra...
  name=$1; shift
  s=$(date +%s.%N); l0=$(cut -d' ' -f1 /proc/loadavg)
  nice -n 5 python -m rankgate.cli dispatch --stage hpc --poll 1 --json "$@" > /tmp/W/bench/$name.out 2> /tmp/W/bench/$name.err
  echo "rc=$? wall=$(echo "$(date +%s.%N) - $s" | bc) load_before=$l0 load_after=$(cut -d' ' -f1 /proc/loadavg)" > /tmp/W/bench/$name.time
}
run one-a --profile /tmp/W/bench/one.toml -- --rankgate-store-durations=/tmp/W/bench/durations.json
cp /tmp/W/bench/durations.json /tmp/W/bench/durations-after-one-a.json
run two-a --profile /tmp/W/bench/two.toml
cp /tmp/W/bench/durations.json /tmp/W/bench/durations-after-two-a.json
run one-b --profile /tmp/W/bench/one.toml
run two-b --profile /tmp/W/bench/two.toml
