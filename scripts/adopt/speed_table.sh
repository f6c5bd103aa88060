#!/usr/bin/env bash
# The adoption speed table (docs/adopting.md): three public suites, each run its own way,
# in rankgate's pool and in place under torchrun (2 ranks; 4 for PyTorch's files, whose
# tests ask for world 4), warm, one after another.
#
# Usage: scripts/adopt/speed_table.sh OUT
# Writes OUT/table.md (the table, the machine, the load before and after each run) and
# OUT/raw/<suite>-<way>.txt (the tail of each pytest run; merge-junit's output in place).
#
# Sources and venvs (one venv per project, each with torch 2.13.0 and rankgate installed;
# INSTALL=1 reinstalls rankgate from this tree into each, with --no-deps):
#   OLMO_SRC  allenai/OLMo-core at fa6c5014c          OLMO_VENV (default /work/venv-olmo)
#   DS_SRC    deepspeedai/DeepSpeed at edaa72212        DS_VENV   (default /work/venv-ds, deepspeed 0.19.8)
#             only its tests/ (git archive edaa72212 tests): tests/conftest.py puts the
#             checkout's root on sys.path, and a deepspeed/ there (0.19.6 at that commit,
#             without teardown='s _release_process_group_references) would shadow 0.19.8
#   TT_SRC    a dir with test/distributed/ holding PyTorch's test_collective_utils.py,
#             test_c10d_object_collectives.py and test_dist2.py (MultiProcessTestCase,
#             DistributedTestBase; test_dist2.py makes groups with torch's newer group API)
#             TT_VENV (default: DS_VENV; it needs expecttest)
# WARMUP=0 skips the untimed warm-up run of each way (default 1: each way once before the
# timed run, so byte-code, DeepSpeed's op build and the page cache are warm).
# ONLY="olmo ds tt" picks suites; WAYS="own pool inplace" picks ways.
set -uo pipefail
out=${1:?usage: scripts/adopt/speed_table.sh OUT}
here=$(cd "$(dirname "$0")/../.." && pwd)
srcs=${ADOPT_SRCS:-/work/adopt-srcs}
OLMO_SRC=${OLMO_SRC:-$srcs/OLMo-core} OLMO_VENV=${OLMO_VENV:-/work/venv-olmo}
DS_SRC=${DS_SRC:-$srcs/DeepSpeed} DS_VENV=${DS_VENV:-/work/venv-ds}
TT_SRC=${TT_SRC:-$srcs/torch-tests} TT_VENV=${TT_VENV:-$DS_VENV}
ONLY=${ONLY:-olmo ds tt} WAYS=${WAYS:-own pool inplace} WARMUP=${WARMUP:-1}
mkdir -p "$out/raw"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1

# suite: directory, venv, selection, adoption line, extra environment
olmo_dir=$OLMO_SRC/src olmo_venv=$OLMO_VENV
olmo_sel='test/distributed/checkpoint_test.py test/distributed/utils_test.py test/distributed/checkpoint/filesystem_test.py -k not_remotely'
olmo_adopt='rankgate_spawn_helpers=olmo_core.testing:run_distributed_test args=func_args kwargs=func_kwargs env=NUM_NODES=1'
olmo_env='' olmo_nproc=2
ds_dir=$DS_SRC/tests ds_venv=$DS_VENV
ds_sel='unit/comm/test_dist.py -k not_TestDistributedFixture'
ds_adopt='rankgate_world_classes=unit.common:DistributedTest marker=world_size backend=backend launcher=is_dist_test own_group=init_distributed:False setup=deepspeed:init_distributed teardown=deepspeed.utils.groups:_release_process_group_references env=LOCAL_SIZE={local_world_size}'
ds_env='LOCAL_SIZE=2' ds_nproc=2
tt_dir=$TT_SRC tt_venv=$TT_VENV
tt_sel='test/distributed/test_collective_utils.py test/distributed/test_c10d_object_collectives.py test/distributed/test_dist2.py'
# In place the same selection: test_dist2.py's ProcessGroupTest (a plain TestCase, not
# adopted, a world-1 group over env:// on 127.0.0.1:29500) hosts its own store there, as a
# plain test in place runs without TORCHELASTIC_USE_AGENT_STORE (the table of 2026-11-28
# left it out: it hung before that).
tt_inplace_sel="$tt_sel"
tt_adopt='rankgate_world_classes=torch.testing._internal.common_distributed:MultiProcessTestCase'
tt_env='' tt_nproc=4  # MultiProcessTestCase's default world_size: 4

selection() {  # "-k not_x" -> -k "not x" (the words travel through one variable)
  local word
  for word in $1; do
    case $word in -k) printf '%s\n' -k ;; not_*) printf '%s\n' "not ${word#not_}" ;; *) printf '%s\n' "$word" ;; esac
  done
}

run_way() {  # run_way SUITE WAY TAG: one pytest run; prints "seconds|summary"
  local suite=$1 way=$2 tag=$3 dir venv sel adopt envs nproc log start end summary
  eval "dir=\$${suite}_dir venv=\$${suite}_venv sel=\$${suite}_sel adopt=\$${suite}_adopt envs=\$${suite}_env nproc=\$${suite}_nproc"
  [ "$way" = inplace ] && eval "sel=\${${suite}_inplace_sel:-\$sel}"
  mapfile -t args < <(selection "$sel")
  log=$out/raw/$suite-$way$tag.txt
  rm -rf "$dir/out.speed"
  start=$(date +%s.%N)
  case $way in
    own) (cd "$dir" && env $envs "$venv/bin/python" -m pytest -p no:cacheprovider -p no:randomly -q "${args[@]}" -p no:rankgate) >"$log.full" 2>&1 ;;
    pool) (cd "$dir" && env $envs "$venv/bin/python" -m pytest -p no:cacheprovider -p no:randomly -q "${args[@]}" -o "$adopt") >"$log.full" 2>&1 ;;
    inplace)
      (cd "$dir" && env $envs "$venv/bin/python" -m torch.distributed.run --standalone --nproc-per-node "$nproc" \
        -m pytest -p no:cacheprovider -p no:randomly -q "${args[@]}" -o "$adopt" --junitxml=out.speed/junit.xml) >"$log.full" 2>&1
      (cd "$dir" && "$venv/bin/rankgate" merge-junit out.speed/) >>"$log.full" 2>&1 ;;
  esac
  end=$(date +%s.%N)
  tail -n 60 "$log.full" | sed 's/\x1b\[[0-9;]*m//g' >"$log" && rm -f "$log.full"  # no colours
  if [ "$way" = inplace ]; then
    summary=$(grep -oE '[0-9]+ tests? on ranks.*' "$log" | tail -n 1)
  else
    summary=$(grep -E '(passed|failed|skipped|error).* in [0-9.]+s' "$log" | tail -n 1 | tr -d '=' | sed 's/^ *//')
  fi
  printf '%.1f|%s\n' "$(echo "$end - $start" | bc)" "${summary:-see raw/$suite-$way$tag.txt}"
}

{
  echo "# Adoption speed table"
  echo
  echo "$(date -u '+%F %T UTC'), $(getconf _NPROCESSORS_ONLN) cores, $(uname -r); rankgate at $(git -C "$here" rev-parse --short HEAD)"
  echo
} >"$out/table.md"
for suite in $ONLY; do
  eval "venv=\$${suite}_venv"
  if [ "${INSTALL:-0}" = 1 ]; then
    "$venv/bin/python" -m pip install -q --no-deps -e "$here" >>"$out/raw/install.txt" 2>&1
  fi
  "$venv/bin/python" -c 'import rankgate, torch, sys; print(sys.argv[1], torch.__version__, rankgate.__file__)' "$suite" >>"$out/raw/versions.txt" 2>&1
done
echo "| suite | selection | its own way | pool | own/pool | in place (torchrun: 2 ranks, tt 4) | load (1 min) before each run |" >>"$out/table.md"
echo "|---|---|---|---|---|---|---|" >>"$out/table.md"
for suite in $ONLY; do
  eval "sel=\$${suite}_sel"
  declare -A wall=() summ=()
  loads=""
  for way in $WAYS; do
    [ "$WARMUP" = 1 ] && run_way "$suite" "$way" -warmup >/dev/null
    loads="$loads $way:$(cut -d' ' -f1 /proc/loadavg)"
    IFS='|' read -r secs text < <(run_way "$suite" "$way" "")
    wall[$way]=$secs summ[$way]=$text
  done
  ratio=-
  if [ -n "${wall[own]:-}" ] && [ -n "${wall[pool]:-}" ]; then
    ratio=$(echo "scale=2; ${wall[own]} / ${wall[pool]}" | bc)x
  fi
  printf '| %s | `%s` | %s s: %s | %s s: %s | %s | %s s: %s |%s |\n' "$suite" "$sel" \
    "${wall[own]:--}" "${summ[own]:-}" "${wall[pool]:--}" "${summ[pool]:-}" "$ratio" \
    "${wall[inplace]:--}" "${summ[inplace]:-}" "$loads" >>"$out/table.md"
  unset wall summ
done
echo >>"$out/table.md"
for suite in $ONLY; do
  eval "isel=\${${suite}_inplace_sel:-}"
  [ -n "$isel" ] && echo "In place, $suite runs \`$isel\` (see the script for why)." >>"$out/table.md"
done
echo >>"$out/table.md"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/table.md"
cat "$out/table.md"
