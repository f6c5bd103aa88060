#!/usr/bin/env bash
# Paired, alternated runs of the 19-test project (world(1)-(4) and plain tests, written
# outside the repository): the pool alone and -n 2, this branch and its merge base
# (BASE_SRC: the base's src/, from git archive; PYTHONPATH puts it first), each under
# proctrack.py (CPU-s from a cpuacct cgroup, process starts and peak live processes).
#   PROJECT=DIR BASE_SRC=DIR RESULTS=DIR [ROUNDS="1 2 3"] alternate.sh
: "${PROJECT:?the 19-test project}" "${BASE_SRC:?the merge base src/}" "${RESULTS:=.}"
TRACK=$(cd "$(dirname "$0")" && pwd)/proctrack.py
cd "$PROJECT" || exit 1
one() { # label pythonpath args
  local label=$1 pp=$2; shift 2
  echo "== $label load $(cut -d' ' -f1-3 /proc/loadavg)"
  PYTHONPATH=$pp python "$TRACK" --json "$RESULTS/proj19-$label.json" -- python -m pytest -q "$@" 2>&1 \
    | grep -E "passed|failed|held at most|proctrack"
}
for i in ${ROUNDS:-1 2 3}; do
  one "pool-after-$i" ""
  one "n2-after-$i" "" -n 2
  one "n2-before-$i" "$BASE_SRC" -n 2
  one "pool-before-$i" "$BASE_SRC"
done
