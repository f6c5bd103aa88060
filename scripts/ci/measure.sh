#!/usr/bin/env bash
# Time .ci/run step by step in a checkout, with pytest's --durations=0 per stage.
#
#   scripts/ci/measure.sh CHECKOUT LOGDIR
#
# Runs CHECKOUT/.ci/run's set-up (every line but the last, traced with a timestamp per
# command), then the README's test command one nox session at a time, each with
# `-- --durations=0`, keeping each stage's log and JUnit file apart under LOGDIR.
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
    bash -c 'PS4="+ \${EPOCHREALTIME} "; set -x; source "$2"; export -p >"$1"' "$checkout/.ci/run" "$logs/setup.env" \
    "$logs/setup.sh" \
    >"$logs/setup.log" 2>&1
echo "setup $(echo "$EPOCHREALTIME - $start" | bc)" >"$logs/times"
source "$logs/setup.env"
unset BASH_XTRACEFD
cat /proc/loadavg >>"$logs/loadavg.setup"
install=${last%% && nox -s *}
sessions=${last##*nox -s }
t=$EPOCHREALTIME
cat /proc/loadavg >"$logs/loadavg.install"
bash -c "$install" >"$logs/install.log" 2>&1
cat /proc/loadavg >>"$logs/loadavg.install"
echo "install $(echo "$EPOCHREALTIME - $t" | bc)" >>"$logs/times"
status=0
for session in $sessions; do
    t=$EPOCHREALTIME
    cat /proc/loadavg >"$logs/loadavg.$session"
    args=()
    [ "$session" = lint ] || args=(-- --durations=0)
    nox -s "$session" "${args[@]}" >"$logs/$session.log" 2>&1 || status=$?
    echo "$session $(echo "$EPOCHREALTIME - $t" | bc) rc=$status" >>"$logs/times"
    cat /proc/loadavg >>"$logs/loadavg.$session"
    [ -f "out/junit/$session.xml" ] && cp "out/junit/$session.xml" "$logs/"
done
echo "total $(echo "$EPOCHREALTIME - $start" | bc)" >>"$logs/times"
cat /proc/loadavg >"$logs/loadavg.end"
exit "$status"
