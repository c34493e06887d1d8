#!/usr/bin/env bash
# refusal_check.sh: the two ways `power run` must refuse a GPT-2 file it cannot run.
#
#   refusal_check.sh POWER_BINARY LIBPOWER_GPT2_WRONG_SDK_SO FIXTURE_DIR
#
#   1. --model-lib with a plugin built against another SDK version (wrong_sdk_plugin.cpp):
#      exits non-zero, and the error names both versions (library_sdk=..., power_sdk=...),
#      the library's being POWER_SDK_VERSION + 1 of Power's;
#   2. no --model-lib: gpt2 is not a built-in architecture, so the load fails with
#      "architecture is not supported" naming gpt2.
# Exit codes: 0 pass, 1 fail, 77 skipped (fixtures absent and CI is not "true").
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 POWER_BINARY LIBPOWER_GPT2_WRONG_SDK_SO FIXTURE_DIR" >&2
  exit 1
fi
power=$1
wrong_plugin=$2
model="$3/gpt2-F32.gguf"

source "$(dirname "$0")/check_common.sh"
require_fixture "$model"
require_files "$power" "$wrong_plugin"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export POWER_HOME="$work/home"
mkdir -p "$POWER_HOME"
ok=1

# Runs power with the given arguments; passes when it exits non-zero and its output matches
# every extended regular expression after "--".
expect_refusal() {
  local name=$1
  shift
  local args=()
  while [[ $1 != "--" ]]; do
    args+=("$1")
    shift
  done
  shift
  local status=0
  "$power" "${args[@]}" >"$work/out" 2>&1 || status=$?
  local missing=""
  for pattern in "$@"; do
    grep -Eq -- "$pattern" "$work/out" || missing+=" '$pattern'"
  done
  if [[ $status -ne 0 && -z "$missing" ]]; then
    echo "  $name: PASS (exit $status): $(tr '\n' ' ' <"$work/out")"
  else
    echo "  $name: FAIL (exit $status, missing:${missing:- none}): $(cat "$work/out")"
    ok=0
  fi
}

# The SDK version Power reports is the one the wrong plugin's is one more than.
expect_refusal "plugin of another SDK version" \
  run --model-lib "$wrong_plugin" -m "$model" -p hi -n 1 -- \
  'another SDK version' 'library_sdk=[0-9]+\.[0-9]+' 'power_sdk=[0-9]+\.[0-9]+'
if [[ $ok -eq 1 ]]; then
  # library_sdk must be power_sdk + 1 (major * 1000 + minor, printed as major.minor).
  python3 - "$work/out" <<'EOF' || ok=0
import re, sys
text = open(sys.argv[1]).read()
lib = re.search(r"library_sdk=(\d+)\.(\d+)", text)
ours = re.search(r"power_sdk=(\d+)\.(\d+)", text)
lib_v = int(lib[1]) * 1000 + int(lib[2])
ours_v = int(ours[1]) * 1000 + int(ours[2])
good = lib_v == ours_v + 1
print(f"  versions named: library {lib[1]}.{lib[2]}, power {ours[1]}.{ours[2]}: "
      f"{'PASS' if good else 'FAIL (the library should be one above)'}")
sys.exit(0 if good else 1)
EOF
fi

expect_refusal "gpt2 without --model-lib" \
  run -m "$model" -p hi -n 1 -- \
  'architecture is not supported' 'architecture=gpt2'

if [[ $ok -eq 1 ]]; then
  echo "refusal_check: PASS"
  exit 0
fi
echo "refusal_check: FAIL"
exit 1
