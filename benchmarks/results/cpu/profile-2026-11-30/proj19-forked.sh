# The 19-test project (../perf-2026-11-29/proj19_test_mix.py as test_mix.py, with a
# pytest.ini of `addopts = -p no:randomly -p no:cacheprovider`) in a folder outside the
# repository; the pool alone, `-n 2` (workers forked from the run's fork server) and
# `-n 2` with ini rankgate_cold_workers (each worker a new python), alternated.
# VENV: a venv with this checkout installed; PROJECT: the folder; RESULTS: where the
# per-run JSON of proctrack goes.
source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
TRACK=CHECKOUT/benchmarks/results/cpu/perf-2026-11-29/proctrack.py
cd PROJECT
for i in 1 2 3; do
  for mode in pool n2 n2cold; do
    case $mode in pool) args="";; n2) args="-n 2";; n2cold) args="-n 2 -o rankgate_cold_workers=true";; esac
    echo "== $mode-$i load $(cut -d' ' -f1-3 /proc/loadavg)"
    /usr/bin/time -f "wall %e s" python $TRACK --json RESULTS/$mode-$i.json -- python -m pytest -q $args 2>&1 | grep -E "passed|failed|held at most|proctrack|wall"
  done
done
