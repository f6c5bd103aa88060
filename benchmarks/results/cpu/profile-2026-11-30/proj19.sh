source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
TRACK=CHECKOUT/benchmarks/results/cpu/perf-2026-11-29/proctrack.py
cd PROJECT
for i in 1 2 3; do
  for mode in pool n2; do
    args=""; [ $mode = n2 ] && args="-n 2"
    echo "== $mode-$i load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "wall %e s" python $TRACK --json RESULTS/$mode-$i.json -- python -m pytest -q $args 2>&1 | grep -E "passed|failed|held at most|proctrack|rank|wall"
  done
done
