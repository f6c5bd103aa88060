#!/usr/bin/env bash
# The NCCL pool's time per test with the collective ledger off (RANKGATE_LEDGER=0) and on
# (RANKGATE_LEDGER=1, the default), or any list of settings, alternated in one lease: does
# turning it on by default move `rankgate bench harness`'s pool median beyond one
# setting's own spread, and which part of it does?
# Usage: scripts/gpu/ledger-ab.sh OUT
# Each run is `rankgate bench harness`'s pool part alone (scripts/ledger/pool_body.py: the
# same trivial test, one all_reduce, no spawn-per-test runs, which --spawn-k cannot turn
# off), every world in one pytest session. The settings go in rotating order, one round
# at a time: "off on" gives off on, on off, off on, ... (a drift hits both alike); "a b c
# d" gives a b c d, b c d a, c d a b, d a b c, a b c d, ... Then, for the default list
# only, one scripts/pool/rank_cpu.py per setting (each rank's CPU per phase) while the
# time allows. Prints a table per world and setting: the median of the runs' medians,
# their min-max, and each setting's difference from the first one's, against that one's
# spread.
# Environment (defaults for a 4-GPU host): LEDGER_AB_VARIANTS ("off on": off is
# RANKGATE_LEDGER=0, on =1, any other word a LEDGER_VARIANT of scripts/ledger/pool_variant
# run with RANKGATE_LEDGER=1, e.g. "off on functions-only nothing"), LEDGER_AB_BACKEND
# (nccl; gloo tries it on a CPU), LEDGER_AB_WORLDS ("2 4"), LEDGER_AB_RUNS (8 of each),
# LEDGER_AB_K (100 tests a world), LEDGER_AB_BUDGET (320 s from the start: no run begins
# that the slowest run so far would take past it), LEDGER_AB_RANK_CPU (1 for the default
# list, else 0), SKIP_INSTALL=1 (this checkout installed already).
# Cost: a run is one fresh pytest session (python and torch started, the fork server, one
# NCCL pool per world: about 17 s on nvidia-h200-x4, of which the 2 x 100 tests take under
# 1 s); this script adds nothing per run but the start of `timeout` and a grep. So
# 4 settings x 8 runs = 32 runs x ~17 s = ~545 s: with LEDGER_AB_BUDGET=550 they fit only
# where no run takes longer than 17 s (the guard stops at the slowest run so far, and the
# pip install before them takes its own seconds: SKIP_INSTALL=1 after a first call);
# 7 rounds (LEDGER_AB_RUNS=7: 28 runs, ~480 s) fit with margin. Stopped early, the last
# round is short of some settings: the table counts each setting's runs.
# Writes OUT/runs.jsonl (one line per run and world, with its "setting"), OUT/table.txt,
# per run its log.
set -uo pipefail
out=${1:?usage: scripts/gpu/ledger-ab.sh OUT}
mkdir -p "$out"
start=$SECONDS
backend=${LEDGER_AB_BACKEND:-nccl}
read -ra worlds <<<"${LEDGER_AB_WORLDS:-2 4}"
runs=${LEDGER_AB_RUNS:-8}
k=${LEDGER_AB_K:-100}
budget=${LEDGER_AB_BUDGET:-320}
read -ra settings <<<"${LEDGER_AB_VARIANTS:-off on}"
rank_cpu=${LEDGER_AB_RANK_CPU:-$([ -z "${LEDGER_AB_VARIANTS:-}" ] && echo 1 || echo 0)}
variant_path=$PWD/scripts/ledger/pool_variant${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
for setting in "${settings[@]}"; do # a mistyped variant stops here, not after the runs
  case $setting in
    off | on) ;;
    *) LEDGER_VARIANT=$setting PYTHONPATH=$variant_path python3 -c "" || exit 2 ;;
  esac
done
if [ -z "${SKIP_INSTALL:-}" ] && [ "$backend" = nccl ]; then
  . scripts/gpu/install.sh "$out/pip.txt" || exit $?
fi
# rotating order: round i starts at setting i mod n ("off on": off on, on off, off on ...)
order=()
n=${#settings[@]}
for ((i = 0; i < runs; i++)); do
  for ((j = 0; j < n; j++)); do order+=("${settings[(i + j) % n]}"); done
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
  case $setting in
    off) ledger=0 variant=none path=${PYTHONPATH:-} ;;
    on) ledger=1 variant=none path=${PYTHONPATH:-} ;;
    *) ledger=1 variant=$setting path=$variant_path ;;
  esac
  log="$out/run$i-$setting.txt"
  began=$SECONDS
  RANKGATE_LEDGER=$ledger LEDGER_VARIANT=$variant PYTHONPATH=$path \
    timeout -k 10 90 python3 scripts/ledger/pool_body.py \
    --backend "$backend" --worlds "${worlds[@]}" --k "$k" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - began))
  ((took > slowest)) && slowest=$took
  grep '^{' "$log" | sed "s/^{/{\"run\": $i, \"setting\": \"$setting\", /" >>"$out/runs.jsonl"
  echo "run $i $setting rc $rc ${took} s: $(grep '^{' "$log" | tr '\n' ' ')"
done
# each rank's CPU per phase, one run per setting (world 2), while the time allows
for setting in 0 1; do
  ((rank_cpu)) || break
  if ((SECONDS - start + slowest > budget)); then
    echo "rank_cpu RANKGATE_LEDGER=$setting not started: $((SECONDS - start)) s gone"
    continue
  fi
  RANKGATE_LEDGER=$setting timeout -k 10 60 python3 scripts/pool/rank_cpu.py \
    --backend "$backend" --world 2 --k "$k" >"$out/rank_cpu-ledger$setting.txt" 2>&1
  echo "rank_cpu RANKGATE_LEDGER=$setting rc $?: $(grep '^{' "$out/rank_cpu-ledger$setting.txt")"
done
python3 - "$out/runs.jsonl" "${settings[@]}" <<'EOF' | tee "$out/table.txt"
import json, statistics, sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
settings = sys.argv[2:]
base = settings[0]
for r in rows:  # a line from before the "setting" field: its ledger field says which
    r.setdefault("setting", "on" if r["ledger"] == "1" else "off")
print(f"{'world':>5} {'setting':>14} {'runs':>4} {'median of medians ms':>21} {'min-max ms':>15}"
      f"  - {base}, against the {base} runs' spread")
for world in sorted({r["world"] for r in rows}):
    medians = {s: [r["median_ms"] for r in rows if r["world"] == world and r["setting"] == s]
               for s in settings}
    mid = {s: statistics.median(m) for s, m in medians.items() if m}
    for s, m in medians.items():
        if not m:
            continue
        line = f"{world:>5} {s:>14} {len(m):>4} {mid[s]:>21.3f} " \
               f"{min(m):>7.3f}-{max(m):<7.3f}"
        if s != base and base in mid:
            spread = max(medians[base]) - min(medians[base])
            diff = mid[s] - mid[base]
            where = "within" if abs(diff) <= spread else "BEYOND"
            line += f"  {diff:+.3f} ms, {where} the {base} spread ({spread:.3f} ms)"
        print(line)
EOF
echo "ledger-ab: $((SECONDS - start)) s"
