# The quick gate from the installed checkout (editable install in VENV), timed by
# scripts/ci/cpu_busy.sh alone (the machine's busy CPU-s from /proc/stat around the
# run; no profiler sampling /proc beside it): `bash gate-run.sh TAG`.
source VENV/bin/activate
unset PYTHONDONTWRITEBYTECODE
cd CHECKOUT
python -c 'from rankgate.workloads.trainer.strategies.deepspeed import build_ops; print(build_ops())'
tag=$1
echo "== gate $tag load $(cut -d' ' -f1-3 /proc/loadavg) $(date +%T) $(git rev-parse --short HEAD) $(git status --short | tr '\n' ' ')"
bash scripts/ci/cpu_busy.sh nox -s gate > OUT/gate-$tag.log 2>&1
grep -E "^cpu_busy|^gate —" OUT/gate-$tag.log
grep -E "^(env-check|lint|unit|dist|bench) " OUT/gate-$tag.log
