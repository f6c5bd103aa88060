# The quick gate three times from the installed checkout (editable install in VENV),
# DeepSpeed's CPU op built first (a first run of any DeepSpeed test builds it once).
source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
cd CHECKOUT
python -c 'from rankgate.workloads.trainer.strategies.deepspeed import build_ops; print(build_ops())'
for i in 1 2 3; do
  echo "== gate $i load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T)"
  python3 scripts/ci/profile_run.py /tmp/gate-n$i.json -- nox -s gate > /tmp/gate-n$i.log 2>&1
  grep -E "^wall|^gate —" /tmp/gate-n$i.log
  grep -E "^(env-check|lint|unit|dist|bench) " /tmp/gate-n$i.log
done
