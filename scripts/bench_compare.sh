#!/usr/bin/env bash
# Side-by-side CPU throughput: `power bench` and llama.cpp's llama-bench on the same GGUF files,
# thread counts and test sizes, interleaved per file and thread count (so both see the same
# machine load), then a table of medians and ratios (ours / llama.cpp).
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/bench_compare.sh [-p 512] [-n 128] [-t 1,2] [-r 5]
#                                                              FILE.gguf...
# POWER (default: build/src/cli/power) names our binary. POWER_BASELINE, when set, names a
# second one (e.g. the build of an earlier commit) that runs right after it on every file and
# thread count, so both ratios come from the same run; the table then also gives the baseline's
# ratio and ours / baseline. llama.cpp is built outside this
# repository by whoever runs the script (cmake -DGGML_NATIVE=ON -DLLAMA_CURL=OFF; target
# llama-bench). Raw JSON lines of both tools are kept in $OUT_DIR (default: a temp dir).
set -euo pipefail
POWER=${POWER:-build/src/cli/power}
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench binary}
P=512 N=128 T=1,2 R=5
while getopts "p:n:t:r:" opt; do
  case $opt in
    p) P=$OPTARG ;;
    n) N=$OPTARG ;;
    t) T=$OPTARG ;;
    r) R=$OPTARG ;;
    *) echo "usage: $0 [-p N] [-n N] [-t 1,2] [-r N] FILE.gguf..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
(($# > 0)) || { echo "no model files given" >&2; exit 2; }
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
ours="$OUT_DIR/power.jsonl" theirs="$OUT_DIR/llama.jsonl" base="$OUT_DIR/baseline.jsonl"
: >"$ours"
: >"$theirs"
: >"$base"
# The files' cached pages are dropped first (POSIX_FADV_DONTNEED), so the first tool's mapping
# reads them back in as the kernel caches mapped reads (2 MiB folios on ext4 / xfs with a recent
# kernel) and both tools stream the same cache. Without this the result depends on how the file
# got cached: a freshly written file sits in 4 KiB pages, and decoding through 4 KiB pages ran
# 25 % slower for both tools on an AMD EPYC VM (docs/PERFORMANCE.md). KEEP_CACHE=1 skips it.
if [[ -z "${KEEP_CACHE:-}" ]]; then
  python3 -c 'import os, sys
for f in sys.argv[1:]:
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)' "$@"
fi
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for f in "$@"; do
  for t in ${T//,/ }; do
    echo "# $f threads $t: power" >&2
    "$POWER" bench -m "$f" -p "$P" -n "$N" -t "$t" -r "$R" --json |
      sed "s|^{|{\"file\":\"$f\",|" >>"$ours"
    if [[ -n "${POWER_BASELINE:-}" ]]; then
      echo "# $f threads $t: power baseline" >&2
      "$POWER_BASELINE" bench -m "$f" -p "$P" -n "$N" -t "$t" -r "$R" --json |
        sed "s|^{|{\"file\":\"$f\",|" >>"$base"
    fi
    echo "# $f threads $t: llama-bench" >&2
    "$LLAMA_BENCH" -m "$f" -p "$P" -n "$N" -t "$t" -r "$R" -o jsonl 2>/dev/null |
      sed "s|^{|{\"file\":\"$f\",|" >>"$theirs"
  done
done
python3 - "$ours" "$theirs" "$base" <<'PY'
import json, statistics, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
theirs = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
base = [json.loads(l) for l in open(sys.argv[3]) if l.startswith("{")]
def base_rate(f, test, t):
    for b in base:
        if b["file"] == f and b["test"] == test and b["threads"] == t:
            return b["tokens_per_s_median"]
    return None
def their_rate(f, test, t):
    for r in theirs:
        name = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        if r["file"] == f and name == test and r["n_threads"] == t:
            s = r.get("samples_ts") or [r["avg_ts"]]
            return statistics.median(s), (statistics.stdev(s) if len(s) > 1 else 0.0)
    return None, None
extra = " baseline tok/s | baseline ratio | ours / baseline |" if base else ""
print("| file | test | threads | power tok/s (median ± sd) | llama.cpp tok/s (median ± sd) | ratio |"
      + extra)
print("|---|---|---|---|---|---|" + ("---|---|---|" if base else ""))
for o in ours:
    m, sd = their_rate(o["file"], o["test"], o["threads"])
    ratio = f"{o['tokens_per_s_median'] / m:.2f}" if m else "n/a"
    theirs_s = f"{m:.2f} ± {sd:.2f}" if m else "n/a"
    row = (f"| {o['file'].split('/')[-1]} | {o['test']} | {o['threads']} | "
           f"{o['tokens_per_s_median']:.2f} ± {o['tokens_per_s_stddev']:.2f} | {theirs_s} | {ratio} |")
    if base:
        b = base_rate(o["file"], o["test"], o["threads"])
        if b:
            bratio = f"{b / m:.2f}" if m else "n/a"
            row += f" {b:.2f} | {bratio} | {o['tokens_per_s_median'] / b:.3f} |"
        else:
            row += " n/a | n/a | n/a |"
    print(row)
PY
echo "# raw: $OUT_DIR" >&2
