#!/usr/bin/env bash
# The machine's busy CPU seconds while a command runs, and its share of all cores.
#   scripts/ci/cpu_busy.sh COMMAND...   (prints one line to stderr when it ends)
# On 2 cores a CPU-bound job cannot take less wall time than busy / 2: this shows how
# far scheduling can go and where only less work helps.
set -uo pipefail
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
read -r busy0 total0 < <(busy)
start=$EPOCHREALTIME
"$@"
status=$?
read -r busy1 total1 < <(busy)
hz=$(getconf CLK_TCK)
awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) -v hz="$hz" \
    -v wall="$(echo "$EPOCHREALTIME - $start" | bc)" -v rc="$status" \
    'BEGIN { printf "cpu_busy: wall %.0f s, busy %.0f CPU-s, %.0f%% of all cores, exit %d\n", wall, b / hz, 100 * b / t, rc }' >&2
exit "$status"
