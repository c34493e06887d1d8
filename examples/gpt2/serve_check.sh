#!/usr/bin/env bash
# serve_check.sh: the GPT-2 plugin served by an unmodified power binary over HTTP.
#
#   serve_check.sh POWER_BINARY LIBPOWER_GPT2_SO FIXTURE_DIR
#
# Starts `power serve --model-lib LIB -m FIXTURE_DIR/gpt2-F32.gguf --port 0` (F32 KV cache, as
# the peer's greedy run; a temporary POWER_HOME so no store or key state leaks in or out),
# then checks:
#   1. GET /v1/models lists the model;
#   2. POST /v1/completions with the first 16 ids of tokens.txt as the prompt, max_tokens 32,
#      temperature 0 and power_receipt: generates exactly gpt2-F32.greedy.txt. The ids are
#      compared through the signed receipt: output.tokens_sha256 is SHA-256 over the ids as
#      little-endian uint32 (src/receipt/receipt.cpp token_ids_sha256), recomputed here from
#      the expected ids; output.n_tokens must be 32 and model.arch "gpt2";
#   3. the completion's text is what `power detokenize` makes of the expected ids: the text of
#      prompt + expected ids minus the text of the prompt alone (the SentencePiece decoder
#      drops a leading space only at the start of a sequence, so the expected ids are rendered
#      in their context rather than alone).
# Then stops the server with SIGTERM and waits for it to exit 0.
# Exit codes: 0 pass, 1 fail, 77 skipped (fixtures absent and CI is not "true").
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 POWER_BINARY LIBPOWER_GPT2_SO FIXTURE_DIR" >&2
  exit 1
fi
power=$1
plugin=$2
fixtures=$3
model="$fixtures/gpt2-F32.gguf"

source "$(dirname "$0")/check_common.sh"
require_fixture "$model"
require_files "$power" "$plugin"

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
export POWER_HOME="$work/home"
mkdir -p "$POWER_HOME"

fail() {
  echo "serve_check: FAIL: $*" >&2
  echo "--- server stderr:" >&2
  cat "$work/server.err" >&2 || true
  exit 1
}

"$power" serve --model-lib "$plugin" -m "$model" --port 0 --kv-type f32 --threads 2 \
  >"$work/server.out" 2>"$work/server.err" &
server_pid=$!

# The listening line carries the port the OS picked.
base=""
for _ in $(seq 1 600); do
  if line=$(grep -m1 -o 'listening on http://127\.0\.0\.1:[0-9]*' "$work/server.out" 2>/dev/null); then
    base=${line#listening on }
    break
  fi
  kill -0 "$server_pid" 2>/dev/null || fail "power serve exited before listening"
  sleep 0.1
done
[[ -n "$base" ]] || fail "power serve did not print its listening line within 60 s"
echo "server at $base"

curl -sS --fail-with-body "$base/v1/models" >"$work/models.json" || fail "GET /v1/models"
model_id=$(python3 - "$work/models.json" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))["data"]
ids = [m["id"] for m in data]
if len(ids) != 1:
    sys.exit(f"expected one model, got {ids}")
print(ids[0])
EOF
) || fail "GET /v1/models: $(cat "$work/models.json")"
echo "GET /v1/models lists: $model_id"

read -r -a tokens <"$fixtures/tokens.txt"
read -r -a expected <"$fixtures/gpt2-F32.greedy.txt"
prompt=("${tokens[@]:0:16}")
python3 - "$model_id" "${prompt[@]}" >"$work/request.json" <<'EOF'
import json, sys
print(json.dumps({"model": sys.argv[1], "prompt": [int(t) for t in sys.argv[2:]],
                  "max_tokens": 32, "temperature": 0, "power_receipt": True}))
EOF
curl -sS --fail-with-body -H 'Content-Type: application/json' --data-binary @"$work/request.json" \
  "$base/v1/completions" >"$work/response.json" || fail "POST /v1/completions: $(cat "$work/response.json")"

join_commas() { local IFS=,; echo "$*"; }
"$power" detokenize --model-lib "$plugin" -m "$model" --ids "$(join_commas "${prompt[@]}")" \
  >"$work/prompt.txt" || fail "power detokenize (prompt)"
"$power" detokenize --model-lib "$plugin" -m "$model" \
  --ids "$(join_commas "${prompt[@]}" "${expected[@]}")" >"$work/full.txt" ||
  fail "power detokenize (prompt + expected ids)"

python3 - "$work/response.json" "$work/prompt.txt" "$work/full.txt" "${expected[@]}" <<'EOF' ||
import hashlib, json, struct, sys
resp = json.load(open(sys.argv[1]))
expected = [int(t) for t in sys.argv[4:]]
ok = True
def check(name, good, detail):
    global ok
    print(f"  {name}: {'PASS' if good else 'FAIL'} ({detail})")
    ok = ok and good

receipt = json.loads(resp["power_receipt"])
want = hashlib.sha256(b"".join(struct.pack("<I", t & 0xFFFFFFFF) for t in expected)).hexdigest()
got = receipt["output"]["tokens_sha256"]
check("model arch", receipt["model"]["arch"] == "gpt2", f"receipt model.arch {receipt['model']['arch']!r}")
check("generated ids", got == want and receipt["output"]["n_tokens"] == len(expected),
      f"receipt tokens_sha256 {got}, expected ids' {want}; n_tokens {receipt['output']['n_tokens']}")
check("usage", resp["usage"]["completion_tokens"] == len(expected)
      and resp["choices"][0]["finish_reason"] == "length",
      f"completion_tokens {resp['usage']['completion_tokens']}, finish_reason "
      f"{resp['choices'][0]['finish_reason']!r}")

# `power detokenize` ends its output with one newline of its own.
def detok(path):
    raw = open(path, "rb").read()
    return raw[:-1] if raw.endswith(b"\n") else raw
prompt_text, full_text = detok(sys.argv[2]), detok(sys.argv[3])
text = resp["choices"][0]["text"].encode()
check("text", full_text.startswith(prompt_text) and full_text[len(prompt_text):] == text,
      f"completion text {text!r}, detokenized expected ids {full_text[len(prompt_text):]!r}")
sys.exit(0 if ok else 1)
EOF
  fail "the completion does not match gpt2-F32.greedy.txt: $(cat "$work/response.json")"

kill -TERM "$server_pid"
status=0
wait "$server_pid" || status=$?
server_pid=""
[[ $status -eq 0 ]] || fail "power serve exited with $status after SIGTERM"
echo "serve_check: PASS"
