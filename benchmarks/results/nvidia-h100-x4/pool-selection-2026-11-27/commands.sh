# The four device calls of this folder, each run as `bash callN.sh` from the checkout root
# (tree f8e04ec) on nvidia-h100-x4 with `.whl-ds` carried; $OUT is the device tool's folder.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

call1() {  # host A -> selection/
  mkdir -p /tmp/o
  timeout -s INT -k 10 590 bash scripts/gpu/pool-selection.sh /tmp/o 560 > /tmp/o/selection.txt 2>&1
  echo "selection rc $?" >> /tmp/o/selection.txt
  tar -czf "$OUT/all.tgz" -C /tmp/o .
}

call2() {  # host B -> pool-xdist/host-b-*
  mkdir -p /tmp/o2
  STOP_SIGNAL=INT POOL_LIMIT=280 timeout -s INT -k 10 578 bash scripts/gpu/two-gpus.sh /tmp/o2 \
    pool-gpu pool-gpu-n2 same-tests > /tmp/o2/log.txt 2>&1
  cp /tmp/o2/log.txt /tmp/o2/results.tgz /tmp/o2/same-tests.txt "$OUT/"
}

call3() {  # host C -> inplace-harness/ and comm/, side by side on disjoint pairs
  mkdir -p /tmp/o3/prep /tmp/o3/ip
  bash scripts/gpu/two-gpus.sh /tmp/o3/prep > /tmp/o3/prep/log.txt 2>&1  # installs only
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  ( CUDA_VISIBLE_DEVICES=0,1 timeout -s INT -k 10 420 python3 -m rankgate.bench.comm --out /tmp/o3/comm \
      --collectives all_reduce -b 1K -e 64M -f 2 --buffer-bytes 64M --auto-thresholds defaults \
      --iters 20 --reps 5 --rounds 7 --graph-max-bytes 0 > /tmp/o3/comm.txt 2>&1 ) &
  ( GPUS=2,3 WORK=/tmp/rg-ip SKIP_INSTALL=1 STOP_SIGNAL=INT INPLACE_PATHS=suites/harness INPLACE_LIMIT=420 \
      bash scripts/gpu/two-gpus.sh /tmp/o3/ip inplace > /tmp/o3/ip/log.txt 2>&1 ) &
  wait
  tar -czf "$OUT/all.tgz" -C /tmp/o3 .
}

call4() {  # host C again (warm) -> pool-xdist/host-c-*
  mkdir -p /tmp/o4
  STOP_SIGNAL=INT POOL_LIMIT=370 WORK=/tmp/rg4 timeout -s INT -k 10 405 bash scripts/gpu/two-gpus.sh \
    /tmp/o4 pool-gpu > /tmp/o4/log.txt 2>&1
  cp /tmp/o4/log.txt /tmp/o4/results.tgz "$OUT/"
}
