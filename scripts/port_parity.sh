#!/usr/bin/env bash
# Port parity (issue #21, the model SDK): the architectures moved onto the public SDK must give
# byte-identical results to the binary from before the port. Builds that commit's `power`
# (only the CLI target, outside the build tree) and runs the same commands with both binaries
# on the shared fixtures and models, comparing the outputs byte for byte:
#   * `power logits` of every decoder fixture (llama, qwen2, qwen3, phi3; every quantization;
#     F32 and F16 KV cache) and of the four stories260K files; a subset again with
#     POWER_FORCE_ISA=scalar;
#   * `power embed --json` of both BERT fixtures under every pooling, raw and normalized;
#   * `power run` text: greedy and seeded sampling of stories260K, prompt in batches of 5,
#     n-gram speculation, and MTP speculation on a synthetic model with MTP layers.
#   scripts/port_parity.sh [BASELINE_COMMIT]
#   POWER_BIN                  this tree's binary (default build/src/cli/power)
#   POWER_PARITY_BASELINE_BIN  use this baseline binary instead of building one
#   POWER_PARITY_DIR           where the baseline is built (default build-parity)
# Without the baseline commit in the clone (a shallow checkout) it says so and skips; without
# ../shared it skips, and fails under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."
# The last commit before the architectures became SDK packages.
baseline=${1:-e78732d}
new_bin=$(realpath "${POWER_BIN:-build/src/cli/power}")
dir=${POWER_PARITY_DIR:-build-parity}
shared=${POWER_SHARED_DIR:-../shared}

if [[ ! -d "$shared/fixtures/models" ]]; then
  if [[ "${CI:-}" == true ]]; then echo "parity: CI=true but $shared is missing" >&2; exit 1; fi
  echo "parity: skipped: no shared fixtures at $shared"
  exit 0
fi
shared=$(realpath "$shared")

old_bin=${POWER_PARITY_BASELINE_BIN:-}
if [[ -z "$old_bin" ]]; then
  if ! git cat-file -e "$baseline^{commit}" 2>/dev/null; then
    echo "parity: skipped: baseline commit $baseline is not in this clone (shallow checkout?)"
    exit 0
  fi
  if [[ ! -x "$dir/build/src/cli/power" || "$(cat "$dir/commit" 2>/dev/null)" != "$baseline" ]]; then
    rm -rf "$dir"
    mkdir -p "$dir/src"
    git archive "$baseline" | tar -x -C "$dir/src"
    cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DPOWER_BUILD_TESTS=OFF >/dev/null
    cmake --build "$dir/build" --target power -j"$(nproc)" >/dev/null
    echo "$baseline" > "$dir/commit"
  fi
  old_bin=$dir/build/src/cli/power
fi
old_bin=$(realpath "$old_bin")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checked=0
failed=0
# same NAME OUTFILE_OR_- ARGS...: runs both binaries; compares the named output file, or stdout.
same() {
  local name=$1 out=$2
  shift 2
  local a=$work/a b=$work/b
  if [[ "$out" == - ]]; then
    "$old_bin" "$@" >"$a" 2>"$work/old.err" || { echo "parity: baseline failed: $name"; cat "$work/old.err"; failed=$((failed + 1)); return; }
    "$new_bin" "$@" >"$b" 2>"$work/new.err" || { echo "parity: FAILED to run: $name"; cat "$work/new.err"; failed=$((failed + 1)); return; }
  else
    "$old_bin" "$@" --out "$a" >/dev/null 2>"$work/old.err" || { echo "parity: baseline failed: $name"; cat "$work/old.err"; failed=$((failed + 1)); return; }
    "$new_bin" "$@" --out "$b" >/dev/null 2>"$work/new.err" || { echo "parity: FAILED to run: $name"; cat "$work/new.err"; failed=$((failed + 1)); return; }
  fi
  checked=$((checked + 1))
  if [[ ! -s "$a" ]]; then
    echo "parity: the baseline wrote nothing: $name"
    failed=$((failed + 1))
  elif ! cmp -s "$a" "$b"; then
    echo "parity: DIFFERS: $name"
    failed=$((failed + 1))
  fi
}

ids() { tr -s ' \n' ',' < "$1" | sed 's/,$//'; }

fx=$shared/fixtures/models
for arch in llama qwen2 qwen3 phi3; do
  tokens=$(ids "$fx/$arch/tokens.txt")
  for g in "$fx/$arch"/*.gguf; do
    for kv in f32 f16; do
      same "logits $(basename "$g") kv $kv" out logits -m "$g" --tokens "$tokens" --kv-type "$kv" -t 2
    done
  done
done
st_tokens=$(ids "$fx/stories260K/tokens.txt")
for g in "$shared"/models/stories260K/*.gguf; do
  same "logits $(basename "$g")" out logits -m "$g" --tokens "$st_tokens" -t 2
done
for g in "$fx/llama/llama-Q4_K_M.gguf" "$fx/qwen3/qwen3-Q8_0.gguf" "$fx/phi3/phi3-F32.gguf"; do
  tokens=$(ids "$(dirname "$g")/tokens.txt")
  POWER_FORCE_ISA=scalar same "logits $(basename "$g") scalar" out logits -m "$g" \
    --tokens "$tokens" --kv-type f16 -t 2
done

emb=$shared/fixtures/embeddings
mapfile -t sentences < "$emb/sentences.txt"
text_args=()
for s in "${sentences[@]}"; do text_args+=(--text "$s"); done
for g in "$emb"/*.gguf; do
  for pool in default none mean cls last; do
    pool_args=()
    [[ $pool != default ]] && pool_args=(--pooling "$pool")
    same "embed $(basename "$g") $pool" - embed -m "$g" --json -t 2 "${pool_args[@]}" "${text_args[@]}"
  done
  same "embed $(basename "$g") normalized" - embed -m "$g" --json --normalize -t 2 "${text_args[@]}"
done

st=$shared/models/stories260K/stories260K-F32.gguf
same "run greedy" - run -m "$st" -p "Once upon a time" -n 64 --temp 0 -t 2
same "run sampled" - run -m "$st" -p "Once upon a time" -n 64 --temp 1 --seed 7 -t 2
same "run batches of 5" - run -m "$st" -p "Once upon a time, there was a little boy" -n 32 \
  --temp 0 -b 5 -t 2
same "run ngram" - run -m "$st" -p "Once upon a time" -n 64 --temp 0 --spec ngram -t 2
# MTP: the drafts are the head's argmax, so the accepted count compares the head's logits too.
"$old_bin" dev synth --shape tiny --type f32 --std 0.3 --mtp 1 --seed 5 \
  --vocab "$shared/fixtures/tokenizer/ggml-vocab-llama-spm.gguf" -o "$work/mtp.gguf" >/dev/null 2>&1
for args in "--temp 0" "--temp 0.8 --seed 3"; do
  # shellcheck disable=SC2086
  same "run mtp $args" - run -m "$work/mtp.gguf" -p "one two three one two three" -n 48 \
    --ignore-eos $args --spec mtp -t 2
  for bin in "$old_bin" "$new_bin"; do
    # shellcheck disable=SC2086
    "$bin" run -m "$work/mtp.gguf" -p "one two three one two three" -n 48 --ignore-eos $args \
      --spec mtp -t 2 2>&1 >/dev/null | grep '^speculative:'
  done > "$work/spec.txt"
  checked=$((checked + 1))
  if [[ $(wc -l < "$work/spec.txt") != 2 || $(sort -u "$work/spec.txt" | wc -l) != 1 ]]; then
    echo "parity: DIFFERS: mtp drafts $args:"; cat "$work/spec.txt"; failed=$((failed + 1))
  fi
done

echo "parity: $checked comparisons against $baseline, $failed failed"
((failed == 0))
