#!/usr/bin/env bash
# Decode speed of a model larger than the memory it is given (docs/RESIDENCY.md "Benchmark").
# For each budget B (a percentage of the model's resident size) every configuration runs inside
# the same memory cgroup, limited to B bytes plus one allowance (-a, MiB) for everything else
# (Power's staging slots, KV cache, scratch, the process), each from a cold page cache:
#   mmap       the file's mapping read directly by the kernels (POWER_REPACK=0, budget 100%):
#              the OS pages weights in and out under the cgroup's limit
#   stream-p0  Power's residency manager at that budget, no read-ahead
#   stream-p2  ... with two groups read ahead (the default)
#   p2-cache   (with -c BYTES) stream-p2 with a weights cache of BYTES for the token-embedding
#              rows (--weights-cache; the others read those rows through the mapping, paged
#              by the kernel under the cgroup's limit); its hits and misses are printed
# and, when LLAMA_CLI names llama.cpp's llama-cli, llama.cpp (its default mmap) under the same
# cgroup. Each run decodes N tokens after a short prompt; the figure is the decode rate that
# `power run` / llama-cli print. Needs root and a cgroup v1 memory controller (v2: memory.max).
#
#   bench/residency_bench.sh [-t THREADS] [-n TOKENS] [-b 100,75,50,25,0] [-a ALLOWANCE_MIB]
#                            [-c CACHE_BYTES] MODEL.gguf
# POWER (default build/src/cli/power) names our binary. Prints one line per run and a table.
set -euo pipefail
POWER=${POWER:-build/src/cli/power}
T=2 N=16 BUDGETS=100,75,50,25,0 ALLOW=384 CACHE=""
while getopts "t:n:b:a:c:" opt; do
  case $opt in
    t) T=$OPTARG ;;
    n) N=$OPTARG ;;
    b) BUDGETS=$OPTARG ;;
    a) ALLOW=$OPTARG ;;
    c) CACHE=$OPTARG ;;
    *) echo "usage: $0 [-t N] [-n N] [-b 100,50,0] [-a MiB] [-c BYTES] MODEL.gguf" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
MODEL=${1:?usage: $0 [-t N] [-n N] [-b 100,50,0] [-a MiB] [-c BYTES] MODEL.gguf}
[[ $(id -u) == 0 ]] || { echo "needs root (memory cgroup)" >&2; exit 2; }

CG=""
if [[ -d /sys/fs/cgroup/memory ]]; then
  CG=/sys/fs/cgroup/memory/power-residency-bench.$$
  mkdir "$CG"
  set_limit() { echo "$1" > "$CG/memory.limit_in_bytes"; }
  peak() { cat "$CG/memory.max_usage_in_bytes"; }
  reset_peak() { echo 0 > "$CG/memory.max_usage_in_bytes"; }
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  CG=/sys/fs/cgroup/power-residency-bench.$$
  mkdir "$CG"
  set_limit() { echo "$1" > "$CG/memory.max"; }
  peak() { cat "$CG/memory.peak" 2>/dev/null || echo 0; }
  reset_peak() { :; }
else
  echo "no memory cgroup controller" >&2; exit 2
fi
cleanup() { rmdir "$CG" 2>/dev/null || true; }
trap cleanup EXIT

cold() {  # drop the file from the page cache and check it with mincore (fincore)
  dd if="$MODEL" iflag=nocache count=0 status=none
  local cached
  cached=$(fincore -nb -o RES "$MODEL" | tr -d ' ')
  echo "${cached:-?}"
}

plan_json=$("$POWER" residency plan -m "$MODEL" --budget 100% --json)
total=$(echo "$plan_json" | sed -n 's/.*"total_bytes": *\([0-9]*\).*/\1/p' | head -1)
file_bytes=$(stat -c %s "$MODEL")
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
isa=$("$POWER" hardware --no-probes 2>/dev/null | sed -n 's/.*"kernel_isa": *"\([a-z0-9]*\)".*/\1/p' | head -1)
echo "# $(date -u +%FT%TZ) $cpu, ${T} threads, isa ${isa:-?}; $(basename "$MODEL"): file $file_bytes bytes,"
echo "# resident size $total bytes; allowance beside the weights ${ALLOW} MiB; $N tokens per run"

declare -A rate
run_one() {  # run_one NAME BUDGET_PCT LIMIT COMMAND...
  local name=$1 pct=$2 limit=$3; shift 3
  set_limit "$limit"
  reset_peak
  local before
  before=$(cold)
  local log
  log=$(mktemp)
  # The command joins the cgroup first, so its every page is charged there.
  if sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$CG" "$@" > /dev/null 2> "$log"; then
    local r
    r=$(sed -n 's/.*decode: [0-9]* tokens in [0-9.]* s (\([0-9.]*\) tokens\/s).*/\1/p' "$log" | tail -1)
    [[ -n $r ]] || r=$(sed -n 's/.*eval time.*( *[0-9.]* ms per token, *\([0-9.]*\) tokens per second).*/\1/p' "$log" | tail -1)
    rate[$name,$pct]=${r:-?}
    grep -h '^weights cache:' "$log" | sed "s/^/  $name $pct%: /" || true
  else
    rate[$name,$pct]="fail"
    tail -3 "$log" >&2
  fi
  printf '%-10s %4s%%  limit %6d MiB  peak %6d MiB  cached before %s  decode %s tok/s\n' \
    "$name" "$pct" $((limit >> 20)) $(($(peak) >> 20)) "$before" "${rate[$name,$pct]}"
  rm -f "$log"
}

IFS=, read -ra budgets <<< "$BUDGETS"
prompt="Once upon a time"
for pct in "${budgets[@]}"; do
  limit=$((total * pct / 100 + (ALLOW << 20)))
  run_one mmap "$pct" "$limit" env POWER_REPACK=0 "$POWER" run -m "$MODEL" -p "$prompt" -n "$N" \
    --ignore-eos --temp 0 -t "$T" --ctx 256 --weights-budget 100%
  for p in 0 2; do
    run_one "stream-p$p" "$pct" "$limit" "$POWER" run -m "$MODEL" -p "$prompt" -n "$N" \
      --ignore-eos --temp 0 -t "$T" --ctx 256 --weights-budget $((total * pct / 100)) \
      --prefetch "$p"
  done
  if [[ -n $CACHE ]]; then
    run_one p2-cache "$pct" "$limit" "$POWER" run -m "$MODEL" -p "$prompt" -n "$N" \
      --ignore-eos --temp 0 -t "$T" --ctx 256 --weights-budget $((total * pct / 100)) \
      --prefetch 2 --weights-cache "$CACHE" --verbose
  fi
  if [[ -n ${LLAMA_CLI:-} ]]; then
    run_one llama.cpp "$pct" "$limit" "$LLAMA_CLI" -m "$MODEL" -p "$prompt" -n "$N" \
      --ignore-eos --temp 0 -t "$T" -c 256 -no-cnv
  fi
done

echo
names=(mmap stream-p0 stream-p2)
[[ -n $CACHE ]] && names+=(p2-cache)
[[ -n ${LLAMA_CLI:-} ]] && names+=(llama.cpp)
printf '| budget |'; for n in "${names[@]}"; do printf ' %s |' "$n"; done; printf ' p2 / mmap |\n'
printf '|---|'; for _ in "${names[@]}"; do printf -- '---|'; done; printf -- '---|\n'
for pct in "${budgets[@]}"; do
  printf '| %s%% |' "$pct"
  for n in "${names[@]}"; do printf ' %s |' "${rate[$n,$pct]}"; done
  awk -v a="${rate[stream-p2,$pct]}" -v b="${rate[mmap,$pct]}" \
    'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf " %.2fx |\n", a / b; else print " - |" }'
done
