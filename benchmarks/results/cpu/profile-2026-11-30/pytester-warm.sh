# pytester's subprocess runs warm: the 8 files that use runpytest_subprocess, alternated
source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
TRACK=MAIN/benchmarks/results/cpu/perf-2026-11-29/proctrack.py
FILES="tests/harness/test_xdist_ranks.py tests/harness/test_infrastructure.py tests/harness/test_adopt.py tests/harness/test_adopt_own_rendezvous.py tests/harness/test_adopt_torchcase.py tests/harness/test_adopt_lines.py tests/harness/test_ledger_roots.py tests/harness/test_ledger_process_group.py"
for round in 1 2; do
  for side in main wt; do
    dir=MAIN; [ $side = wt ] && dir=BRANCH  # MAIN at fb86ab2; BRANCH: the change, same venv
    cd $dir
    echo "== $side-$round load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
    python $TRACK --json /tmp/ab-$side-$round.json -- python -m pytest -q -p no:randomly -n 3 -m "dist and not gpu" $FILES 2>&1 | grep -E "passed|failed" | cut -c1-200
    python3 -c "import json; r=json.load(open('/tmp/ab-$side-$round.json')); print('wall', r['wall_s'], 'cpu', r['cpu_s'], {k: (v['starts'], v['cpu_s_sampled']) for k, v in r['starts_by_kind'].items() if v['cpu_s_sampled'] > 1})"
  done
done
