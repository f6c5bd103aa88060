#!/usr/bin/env bash
# After a change to the harness, on a one-GPU host: the whole `-m "dist or gpu"` selection
# of the default test paths in the pool under `-n 6`, or in place under
# `torchrun --nproc-per-node=2` (two ranks sharing the GPU) with merge-junit.
# On a host of more GPUs the same, with XDIST workers (default 6) and NPROC ranks in place
# (default 2; 4 on a 4-GPU host).
# Usage: scripts/gpu/one-gpu-check.sh OUT pool|inplace [SECONDS [PATH...]]
# (PATHs narrow the selection, e.g. `suites` or `tests`, to fit one device call.)
# Writes OUT/env.txt, OUT/<step>.txt (the run's log, its rc and wall time at the end) and
# OUT/<step>.tgz (JUnit files and merged verdicts).
set -uo pipefail
out=$1 step=$2 limit=${3:-540}
shift $(($# < 3 ? $# : 3))
# SKIP_INSTALL=1: installed already (two checks side by side must not reinstall at once)
[ -n "${SKIP_INSTALL:-}" ] || . scripts/gpu/install.sh "$out/pip.txt" || exit $?
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nproc; git log -1 --format='tree %h %s' 2>/dev/null
} >"$out/env.txt" 2>&1
work=$(mktemp -d) && start=$SECONDS
case $step in
  pool)
    timeout -s INT -k 30 "$limit" python3 -m pytest -p no:cacheprovider -q -rfE -n "${XDIST:-6}" \
      -m "dist or gpu" --junitxml="$work/pool.xml" "$@" >"$out/pool.txt" 2>&1 ;;
  inplace)
    timeout -s INT -k 30 "$limit" torchrun --standalone --nproc-per-node="${NPROC:-2}" -m pytest \
      -p no:cacheprovider -q -rfE -m "dist or gpu" --junitxml="$work/junit.xml" "$@" \
      >"$out/inplace.txt" 2>&1 ;;
  *) echo "step: pool or inplace, not $step" >&2; exit 2 ;;
esac
rc=$?
echo "rc $rc wall $((SECONDS - start)) s" >>"$out/$step.txt"
if [ "$step" = inplace ]; then
  (cd "$work" && python3 -m rankgate.cli merge-junit --world "${NPROC:-2}" -o merged.xml . ; echo "merge-junit rc $?") \
    >>"$out/inplace.txt" 2>&1
fi
tar -czf "$out/$step.tgz" -C "$work" .
tail -6 "$out/$step.txt"
