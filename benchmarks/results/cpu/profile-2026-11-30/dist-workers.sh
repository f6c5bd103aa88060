source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
cd BRANCH
TRACK=BRANCH/benchmarks/results/cpu/perf-2026-11-29/proctrack.py
for n in 3 4; do
  echo "== dist quick -n $n load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
  python $TRACK --json /tmp/distn-$n.json -- python -m pytest -q -p no:randomly -n $n -m "(dist and not gpu) and not slow" 2>&1 | grep -E "passed|failed|proctrack" | cut -c1-200
done
