#!/usr/bin/env bash
# The NCCL pool's time per test with the collective ledger off (RANKGATE_LEDGER=0) and on
# (RANKGATE_LEDGER=1, the default), alternated in one lease: does turning it on by default
# move `rankgate bench harness`'s pool median beyond one setting's own spread?
# Usage: scripts/gpu/ledger-ab.sh OUT
# Each run is `rankgate bench harness`'s pool part alone (scripts/ledger/pool_body.py: the
# same trivial test, one all_reduce, no spawn-per-test runs, which --spawn-k cannot turn
# off), every world in one pytest session. Runs go off on on off, off on on off, ... (a
# drift hits both alike); then one scripts/pool/rank_cpu.py per setting (each rank's CPU
# per phase) while the time allows. Prints a table per world and setting: the median of
# the runs' medians, their min-max, and on's difference against the off runs' spread.
# Environment (defaults for a 4-GPU host): LEDGER_AB_BACKEND (nccl; gloo tries it on a
# CPU), LEDGER_AB_WORLDS ("2 4"), LEDGER_AB_RUNS (8 of each), LEDGER_AB_K (100 tests a
# world), LEDGER_AB_BUDGET (320 s from the start: no run begins that the slowest run so
# far would take past it), SKIP_INSTALL=1 (this checkout installed already).
# Writes OUT/runs.jsonl (one line per run and world), OUT/table.txt, per run its log.
set -uo pipefail
out=${1:?usage: scripts/gpu/ledger-ab.sh OUT}
mkdir -p "$out"
start=$SECONDS
backend=${LEDGER_AB_BACKEND:-nccl}
read -ra worlds <<<"${LEDGER_AB_WORLDS:-2 4}"
runs=${LEDGER_AB_RUNS:-8}
k=${LEDGER_AB_K:-100}
budget=${LEDGER_AB_BUDGET:-320}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
if [ -z "${SKIP_INSTALL:-}" ] && [ "$backend" = nccl ]; then
  . scripts/gpu/install.sh "$out/pip.txt" || exit $?
fi
# off on on off, repeated: `runs` of each
order=()
for ((i = 0; i < runs; i++)); do
  if ((i % 2 == 0)); then order+=(0 1); else order+=(1 0); fi
done
: >"$out/runs.jsonl"
slowest=0
i=0
for setting in "${order[@]}"; do
  i=$((i + 1))
  if ((SECONDS - start + slowest > budget)); then
    echo "run $i and later not started: $((SECONDS - start)) s gone, the slowest run took $slowest s"
    break
  fi
  log="$out/run$i-ledger$setting.txt"
  began=$SECONDS
  RANKGATE_LEDGER=$setting timeout -k 10 90 python3 scripts/ledger/pool_body.py \
    --backend "$backend" --worlds "${worlds[@]}" --k "$k" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - began))
  ((took > slowest)) && slowest=$took
  grep '^{' "$log" | sed "s/^{/{\"run\": $i, /" >>"$out/runs.jsonl"
  echo "run $i RANKGATE_LEDGER=$setting rc $rc ${took} s: $(grep '^{' "$log" | tr '\n' ' ')"
done
# each rank's CPU per phase, one run per setting (world 2), while the time allows
for setting in 0 1; do
  if ((SECONDS - start + slowest > budget)); then
    echo "rank_cpu RANKGATE_LEDGER=$setting not started: $((SECONDS - start)) s gone"
    continue
  fi
  RANKGATE_LEDGER=$setting timeout -k 10 60 python3 scripts/pool/rank_cpu.py \
    --backend "$backend" --world 2 --k "$k" >"$out/rank_cpu-ledger$setting.txt" 2>&1
  echo "rank_cpu RANKGATE_LEDGER=$setting rc $?: $(grep '^{' "$out/rank_cpu-ledger$setting.txt")"
done
python3 - "$out/runs.jsonl" <<'EOF' | tee "$out/table.txt"
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print(f"{'world':>5} {'ledger':>6} {'runs':>4} {'median of medians ms':>21} {'min-max ms':>15}"
      f"  on - off, against the off runs' spread")
for world in sorted({r["world"] for r in rows}):
    medians = {s: [r["median_ms"] for r in rows if r["world"] == world and r["ledger"] == s]
               for s in ("0", "1")}
    mid = {s: statistics.median(m) for s, m in medians.items() if m}
    for s, m in medians.items():
        if not m:
            continue
        line = f"{world:>5} {'on' if s == '1' else 'off':>6} {len(m):>4} {mid[s]:>21.3f} " \
               f"{min(m):>7.3f}-{max(m):<7.3f}"
        if s == "1" and "0" in mid:
            spread = max(medians["0"]) - min(medians["0"])
            diff = mid["1"] - mid["0"]
            where = "within" if abs(diff) <= spread else "BEYOND"
            line += f"  {diff:+.3f} ms, {where} the off spread ({spread:.3f} ms)"
        print(line)
EOF
echo "ledger-ab: $((SECONDS - start)) s"
