#!/usr/bin/env bash
# Time .ci/run step by step in a checkout, with pytest's --durations=0 per stage.
#
#   scripts/ci/measure.sh CHECKOUT LOGDIR
#
# Runs CHECKOUT/.ci/run's set-up (every line but the last, traced with a timestamp per
# command), then the README's test command (its last line) with --durations=0, keeping
# its log, out/gate.json, each stage's JUnit file and side-by-side log under LOGDIR.
# scripts/ci/durations.py LOGDIR writes the summary (ci-durations.txt) from them.
set -euo pipefail
checkout=$(cd "$1" && pwd)
logs=$(mkdir -p "$2" && cd "$2" && pwd)
cd "$checkout"
last=$(tail -n 1 .ci/run)
case "$last" in
    *"nox -s "*) ;;
    *) echo "measure: the last line of .ci/run is not the nox command: $last" >&2; exit 2 ;;
esac
head -n -1 .ci/run >"$logs/setup.sh"
export CI=true
cat /proc/loadavg >"$logs/loadavg.start"
cat /proc/loadavg >"$logs/loadavg.setup"
start=$EPOCHREALTIME
# The set-up exports (e.g. RANKGATE_CONTAINER_FRESH) must reach the stages: source it,
# with $0 set to .ci/run, whose `cd "$(dirname "$0")/.."` it keeps.
# (bash run as root ignores PS4 from the environment: set it inside.)
BASH_XTRACEFD=7 7>"$logs/setup.trace" \
    bash -c 'PS4="+ \${EPOCHREALTIME} "; set -x; source "$2"; export -p | grep -v " BASH_XTRACEFD=" >"$1"' "$checkout/.ci/run" "$logs/setup.env" \
    "$logs/setup.sh" \
    >"$logs/setup.log" 2>&1
echo "setup $(echo "$EPOCHREALTIME - $start" | bc)" >"$logs/times"
source "$logs/setup.env"
unset BASH_XTRACEFD
cat /proc/loadavg >>"$logs/loadavg.setup"
install=${last%% && nox -s *}
tests=${last#"$install && "}
t=$EPOCHREALTIME
cat /proc/loadavg >"$logs/loadavg.install"
bash -c "$install" >"$logs/install.log" 2>&1
cat /proc/loadavg >>"$logs/loadavg.install"
echo "install $(echo "$EPOCHREALTIME - $t" | bc)" >>"$logs/times"
# The test command as CI runs it (the gate: hpc and container side by side), with
# --durations=0 for every pytest; gate.json has each stage's seconds, JUnit each test's.
t=$EPOCHREALTIME
cat /proc/loadavg >"$logs/loadavg.tests"
status=0
bash -c "$tests --durations=0" >"$logs/tests.log" 2>&1 || status=$?
echo "tests $(echo "$EPOCHREALTIME - $t" | bc) rc=$status" >>"$logs/times"
cat /proc/loadavg >>"$logs/loadavg.tests"
cp out/gate.json "$logs/" 2>/dev/null || true
cp out/junit/*.xml out/logs/*.log "$logs/" 2>/dev/null || true
echo "total $(echo "$EPOCHREALTIME - $start" | bc)" >>"$logs/times"
cat /proc/loadavg >"$logs/loadavg.end"
exit "$status"
