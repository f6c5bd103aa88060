#!/usr/bin/env bash
# A user's one-GPU workstation: the whole `dist or gpu` selection of suites/ and tests/harness/, in the pool
# (STEP=pool) or in place under torchrun with 2 ranks sharing the GPU (STEP=inplace).
# Usage: STEP=pool|inplace [LIMIT=540] scripts/gpu/one-gpu-node.sh OUT
# Writes OUT/<step>/: the pytest log, JUnit (in place: one file per rank and the merged
# verdict from `rankgate merge-junit`), env.txt and the command that ran.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${1:?usage: STEP=pool|inplace scripts/gpu/one-gpu-node.sh OUT}
step=${STEP:?STEP=pool or STEP=inplace}
mkdir -p "$out/$step"
. scripts/gpu/install.sh "$out/$step/pip.txt" || exit $?
{
  date -u; nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
} >"$out/$step/env.txt" 2>&1
select=(-p no:cacheprovider -m "dist or gpu" suites tests/harness -q -rfEs)
case $step in
pool)
  cmd=(python3 -m pytest "${select[@]}" --junitxml="$out/pool/junit.xml")
  ;;
inplace)
  cmd=(torchrun --standalone --nproc-per-node=2 -m pytest "${select[@]}"
       --junitxml="$out/inplace/junit.xml")
  ;;
*) echo "STEP must be pool or inplace, got '$step'" >&2; exit 2 ;;
esac
echo "${cmd[*]}" >"$out/$step/command.txt"
timeout "${LIMIT:-540}" "${cmd[@]}" >"$out/$step/pytest.txt" 2>&1
echo "rc $?" | tee -a "$out/$step/command.txt"
tail -4 "$out/$step/pytest.txt"
if [ "$step" = inplace ]; then
  python3 -m rankgate.cli merge-junit "$out/inplace" -o "$out/inplace/merged.xml" \
    >"$out/inplace/merge.txt" 2>&1
  echo "merge rc $?" | tee -a "$out/inplace/command.txt"
  tail -3 "$out/inplace/merge.txt"
fi
