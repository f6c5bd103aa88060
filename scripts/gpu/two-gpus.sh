#!/usr/bin/env bash
# The 2-GPU evidence of one lease: every GPU and dist test in place and in the pool, the
# pool under pytest-xdist against the pool alone, and the harness's own overhead.
# Usage: scripts/gpu/two-gpus.sh OUT STEP...
#   steps: inplace pool-gpu pool-gpu-n2 same-tests pool-dist pool-rest pool-harness harness
#          pool-all ledger ledger-pool cp comm attention attn-chunks
#   (COMM_TIMING, COMM_SIZES: the comm step's --iters/--reps/--rounds and -b/-e;
#   LEDGER_RUNS, LEDGER_COLLECTIVES, LEDGER_K, LEDGER_BACKEND: the ledger-pool step's runs)
# Writes OUT/env.txt and per step a log (OUT/<step>.txt) and its JUnit under /tmp/rg;
# the end packs /tmp/rg into OUT/results.tgz (the device tool brings back 8 files).
# DeepSpeed and what it needs, and expecttest (torch.testing._internal imports it), come as
# wheels in .whl-ds (scripts/gpu/wheels.sh builds it; carried), installed beside the host's
# packages when one is missing.
# GPUS=0,1 (CUDA_VISIBLE_DEVICES) keeps a run on some GPUs, so two runs share a 4-GPU host
# (each with its own OUT and WORK, after one run without steps installed: SKIP_INSTALL=1).
# INPLACE_PATHS and HARNESS_FILES narrow the inplace and pool-harness steps (one half each);
# XDIST is pool-rest's, pool-harness's and pool-all's number of xdist workers; NPROC the
# inplace step's ranks (default 2; 4 on a whole 4-GPU host).
set -uo pipefail
out=$1; shift
work=/tmp/rg
mkdir -p "$work"
export NVSHMEM_DISABLE_NVLS=1
[ -n "${GPUS:-}" ] && export CUDA_VISIBLE_DEVICES=$GPUS RANKGATE_GPU_LEASE_DIR=/tmp/leases-${GPUS//,/-}
work=${WORK:-$work} && mkdir -p "$work"  # one per concurrent run
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${SKIP_INSTALL:-}" ]; then  # SKIP_INSTALL=1: an earlier run of this script did it
  . scripts/gpu/install.sh "$out/pip.txt" || exit $?
  if [ -d .whl-ds ] && ! python3 -c 'import deepspeed, expecttest' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
        .whl-ds/*.whl >>"$out/pip.txt" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
{
  date -u; nvidia-smi -L; nvidia-smi topo -m
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  # DeepSpeed's version where it is installed: without it the versions line was lost.
  python3 -c 'import importlib.util as u, sys, torch; ds = u.find_spec("deepspeed") and __import__("deepspeed"); print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "deepspeed", ds.__version__ if ds else "not installed")'
  nproc
} >"$out/env.txt" 2>&1
step() { echo "=== $1 $(date -u +%T)"; }
timed() {  # timed NAME LIMIT CMD...: the command's log in OUT/NAME.txt, its wall time after it
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  # STOP_SIGNAL=INT: pytest prints its summary and JUnit on SIGINT wherever SIGTERM left none
  timeout -s "${STOP_SIGNAL:-TERM}" -k 30 "$limit" "$@" >"$work/$name.txt" 2>&1
  local rc=$?
  echo "rc $rc wall $((SECONDS - start)) s" | tee -a "$work/$name.txt"
  tail -4 "$work/$name.txt" | head -3
}
pytest_=(python3 -m pytest -p no:cacheprovider -q -rfEs)
for s in "$@"; do
  step "$s"
  case $s in
    inplace)  # every rank its own pytest; merge-junit makes one verdict
      mkdir -p "$work/inplace"
      timed inplace "${INPLACE_LIMIT:-260}" torchrun --standalone --nproc-per-node="${NPROC:-2}" -m pytest \
        -p no:cacheprovider -q -rfEs -m "dist or gpu" ${INPLACE_PATHS:-suites tests/harness} \
        --junitxml="$work/inplace/junit.xml"
      (cd "$work/inplace" && python3 -m rankgate.cli merge-junit --world "${NPROC:-2}" -o merged.xml . \
        >merge-junit.txt 2>&1; echo "merge-junit rc $?" >>merge-junit.txt)
      tail -3 "$work/inplace/merge-junit.txt" ;;
    pool-gpu)
      timed pool-gpu "${POOL_LIMIT:-320}" "${pytest_[@]}" -m gpu suites tests/harness \
        --junitxml="$work/pool-gpu.xml" ;;
    pool-gpu-n2)
      timed pool-gpu-n2 "${POOL_LIMIT:-200}" "${pytest_[@]}" -n 2 -m gpu suites tests/harness \
        --junitxml="$work/pool-gpu-n2.xml" ;;
    same-tests)
      python3 scripts/gpu/same_tests.py "$work/pool-gpu.xml" "$work/pool-gpu-n2.xml" \
        | tee "$work/same-tests.txt" ;;
    pool-dist)  # the CPU world tests, on this host's cores, four xdist workers
      timed pool-dist "${DIST_LIMIT:-300}" "${pytest_[@]}" -n 4 -m "dist and not gpu" suites tests/harness \
        --junitxml="$work/pool-dist.xml" ;;
    pool-rest)  # every dist or gpu test of the suites but the harness's own, in the pool
      timed pool-rest "${POOL_LIMIT:-400}" "${pytest_[@]}" -n "${XDIST:-3}" -m "dist or gpu" \
        suites --junitxml="$work/pool-rest.xml" ;;
    pool-all)  # the whole dist or gpu selection (suites, harness), one pool run on every GPU
      # POOL_BASETEMP keeps every test's tmp_path (the planted cases' inner outputs)
      timed pool-all "${POOL_LIMIT:-540}" "${pytest_[@]}" -n "${XDIST:-4}" -m "dist or gpu" \
        ${POOL_BASETEMP:+--basetemp="$POOL_BASETEMP"} suites tests/harness --junitxml="$work/pool-all.xml" ;;
    pool-harness)  # the harness's own GPU tests and the adoption suites, in the pool
      timed pool-harness "${POOL_LIMIT:-300}" "${pytest_[@]}" ${XDIST:+-n $XDIST} -m "dist or gpu" \
        ${HARNESS_FILES:-tests/harness/test_gpu.py tests/harness/test_adopt.py \
        tests/harness/test_adopt_torchcase.py tests/harness/test_adopt_freshgroup.py \
        tests/harness/test_ledger_default.py} \
        --junitxml="$work/pool-harness.xml" ;;
    harness)
      for backend in nccl gloo; do
        timeout 90 python3 -m rankgate.cli bench harness --backend "$backend" --worlds 2 --json \
          >"$work/harness_$backend.txt" 2>&1
        echo "$backend rc $?"; tail -6 "$work/harness_$backend.txt"
      done ;;
    ledger)  # the collective ledger's cost per call, NCCL and gloo, and where it goes
      timed ledger-cost 120 python3 -m rankgate.cli bench ledger --backends nccl,gloo --json
      for backend in nccl gloo; do
        for gc in "" --no-gc; do
          timeout 120 python3 scripts/ledger/wrapper_breakdown.py $backend $gc \
            >>"$work/ledger-breakdown.txt" 2>&1
        done
      done
      grep -v '^{' "$work/ledger-breakdown.txt" ;;
    ledger-pool)  # the NCCL pool's per test, runs in the order LEDGER_RUNS gives (default
                  # off full full off off full full off: a drift hits both alike): off is
                  # RANKGATE_LEDGER=0, full the ledger, pass its wrappers forwarding only,
                  # dist recording on torch.distributed alone (scripts/ledger/pool_variant);
                  # each for every count in LEDGER_COLLECTIVES (all_reduce calls per test)
      i=0
      for collectives in ${LEDGER_COLLECTIVES:-1}; do
        for variant in ${LEDGER_RUNS:-off full full off off full full off}; do
          i=$((i + 1))
          log="$work/pool-body-run$i-c$collectives-$variant.txt"
          RANKGATE_LEDGER=$([ $variant = off ] && echo 0 || echo 1) \
          LEDGER_VARIANT=$(case $variant in pass) echo passthrough ;; dist) echo dist-only ;; *) echo none ;; esac) \
          PYTHONPATH=$PWD/scripts/ledger/pool_variant${PYTHONPATH:+:$PYTHONPATH} \
            timeout 90 python3 scripts/ledger/pool_body.py --backend "${LEDGER_BACKEND:-nccl}" \
            --collectives "$collectives" --k "${LEDGER_K:-200}" >"$log" 2>&1
          echo "run $i c$collectives $variant rc $?: $(grep '^{' "$log")"
        done
      done ;;
    cp)  # PyTorch's context parallel: the kernels that ran and each rank's errors, from the
         # script with the test's shapes, then the test itself (its xfail names the kernels)
      timed cp-script 120 torchrun --standalone --nproc-per-node=2 scripts/cp/pytorch_cp_sdpa_kernels.py
      grep '^{' "$work/cp-script.txt" >"$work/cp-script.jsonl"
      # the same after rankgate's ring ran in the process, as in the suite's test
      timed cp-script-ring-first 120 torchrun --standalone --nproc-per-node=2 \
        scripts/cp/pytorch_cp_sdpa_kernels.py --ring-first --paths default,cudnn,flash
      grep '^{' "$work/cp-script-ring-first.txt" >"$work/cp-script-ring-first.jsonl"
      timed cp-test 120 "${pytest_[@]}" -rxX \
        "suites/parallel/test_parallel_peer.py::test_ring_matches_pytorch_context_parallel_gpu" ;;
    comm)  # nccl-tests built here against torch's NCCL, then the comm bench beside it
      # nvidia.nccl is a namespace package (no __file__): its folder is on __path__
      nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])') || exit 1
      home=$work/nccl-home && mkdir -p "$home/lib" && ln -sf "$nccl/include" "$home/include"
      ln -sf "$(ls "$nccl"/lib/libnccl.so* | head -1)" "$home/lib/libnccl.so"
      timed nccl-tests-build 300 make -C .nccl-tests -j 16 MPI=0 NCCL_HOME="$home" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
        CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
      export LD_LIBRARY_PATH=$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      timed comm "${COMM_LIMIT:-300}" python3 -m rankgate.bench.comm --out "$work/comm" \
        --collectives all_reduce ${COMM_SIZES:--b 1K -e 64M} -f 2 --buffer-bytes 64M --auto-thresholds defaults \
        ${COMM_TIMING:---iters 20 --reps 5 --rounds 3} --graph-max-bytes 64M \
        --nccl-tests .nccl-tests/build
      grep -E "^# " "$work/comm.txt" | tail -12 ;;
    attention)  # ring against PyTorch's context parallel and one GPU, one lease
      timed attention "${ATTN_LIMIT:-240}" python3 -m rankgate.cli bench attention --worlds 1,2 \
        --seq-lens 16K,32K,64K,128K --reps 3 --skip ring@1 --fit-cap-gib 8 --out "$work/attention"
      tail -8 "$work/attention.txt" ;;
    attn-chunks)  # the ring's heads per kernel call at the short lengths, world 2
      for chunks in 1 2 4; do
        timed "attn-chunks-$chunks" 120 python3 -m rankgate.cli bench attention --worlds 2 \
          --methods ring,torch-cp --seq-lens 8K,16K,32K --reps 5 --no-profile \
          --head-chunks "$chunks" --out "$work/attn-chunks-$chunks"
        tail -5 "$work/attn-chunks-$chunks.txt"
      done ;;
    *) echo "unknown step $s" ;;
  esac
done
step finished
cp "$out/env.txt" "$work/"
tar -czf "$out/results.tgz" -C "$work" .
for f in inplace/merge-junit.txt same-tests.txt; do
  if [ -f "$work/$f" ]; then cp "$work/$f" "$out/"; fi  # an absent file is no failure
done
