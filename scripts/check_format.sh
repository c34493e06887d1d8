#!/usr/bin/env bash
# Fails when any C++ source differs from what clang-format (root .clang-format) would write.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cc' '*.hpp' 2>/dev/null || true)
if ((${#files[@]} == 0)); then
  mapfile -t files < <(find src include tests fuzz bench examples -name '*.cpp' -o -name '*.h' 2>/dev/null)
fi
bad=0
for f in "${files[@]}"; do
  [[ -f "$f" ]] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "format: $f differs from clang-format (run: clang-format -i $f)"
    bad=1
  fi
done
if ((bad)); then exit 1; fi
echo "format: ${#files[@]} files clean"
