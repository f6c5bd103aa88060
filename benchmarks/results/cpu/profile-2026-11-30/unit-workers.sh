source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
cd CHECKOUT
TRACK=CHECKOUT/benchmarks/results/cpu/perf-2026-11-29/proctrack.py
for n in 3 2 4; do
  echo "== unit -n $n load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
  python $TRACK --json /tmp/unitn-$n.json -- python -m pytest -q -p no:randomly -n $n -m "unit and not slow" 2>&1 | grep -E "passed|failed|proctrack" | cut -c1-200
done
