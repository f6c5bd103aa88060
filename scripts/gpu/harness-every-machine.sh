#!/bin/bash
# The harness's "one test file on every machine" run on a GPU host, outputs under $1:
# the CPU-tensor module in the pool, under torchrun and under mpirun (where installed),
# `pytest -m gpu tests/harness` in the pool, and
# `pytest -m "dist or gpu" suites/ tests/harness/` under torchrun --nproc-per-node=2 with
# each rank's JUnit kept (all/).
# ALL_S bounds the last step (seconds, default 200).
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:?usage: harness-every-machine.sh OUT_DIR}
mkdir -p "$OUT/all"
. scripts/gpu/install.sh "$OUT/pip.txt" || exit $?
set -o pipefail
R=$OUT/run.txt
step() { echo "=== $* ===" | tee -a "$R"; }
step versions
{ nvidia-smi -L
  python3 -c "import torch, sys; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', '.'.join(map(str, torch.cuda.nccl.version())), 'gpus', torch.cuda.device_count())"
  python3 -c "import pytest_timeout; print('pytest-timeout', pytest_timeout.__name__, 'importable')"
  command -v mpirun && mpirun --version | head -1; } 2>&1 | tee -a "$R"
P=(python3 -m pytest -p no:cacheprovider -rs)
step "pool: CPU-tensor module"
timeout 120 "${P[@]}" tests/harness/test_cpu_tensors.py 2>&1 | tail -15 | tee -a "$R"
step "pool: pytest -m gpu tests/harness"
timeout 150 "${P[@]}" -m gpu tests/harness 2>&1 | tail -25 | tee -a "$R"
step "torchrun 2: CPU-tensor module"
timeout 90 torchrun --standalone --nproc-per-node=2 -m pytest -p no:cacheprovider -rs \
    tests/harness/test_cpu_tensors.py 2>&1 | grep -v "OMP_NUM\|^\*\*\*" | tail -12 | tee -a "$R"
if command -v mpirun >/dev/null; then
    step "mpirun 2: CPU-tensor module"
    timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST python3 -m pytest -p no:cacheprovider -rs \
        tests/harness/test_cpu_tensors.py 2>&1 | tail -12 | tee -a "$R"
else
    step "mpirun: not installed on this host"
fi
step "torchrun 2: pytest -m 'dist or gpu' suites/ tests/harness/ (each rank's JUnit in all/)"
timeout "${ALL_S:-200}" torchrun --standalone --nproc-per-node=2 -m pytest -p no:cacheprovider -q \
    -rfEs -m "dist or gpu" suites/ tests/harness/ --junitxml="$OUT/all/junit.xml" > "$OUT/dist_gpu_torchrun.txt" 2>&1
echo "rc=$?" | tee -a "$R"
tail -5 "$OUT/dist_gpu_torchrun.txt" | tee -a "$R"
python3 -m rankgate.cli merge-junit "$OUT/all" -o "$OUT/merged.xml" 2>&1 | tail -40 | tee -a "$R"
