#!/usr/bin/env bash
# Power's main job on a real model. Until `power serve` exists (issue #7) this builds Power and
# generates a story with stories260K, read from the mirror directory POWER_MIRRORS (a directory
# holding stories260K/; default ../shared/models next to this checkout). Extra arguments go to
# `power run` (e.g. -p "Once upon a time" -n 64 --temp 0).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DPOWER_BUILD_TESTS=OFF
mirror=${POWER_MIRRORS:-$(cd .. && pwd)/shared/models}
model=$mirror/stories260K/stories260K-F32.gguf
if [[ ! -f "$model" ]]; then
  echo "run: $model not found; set POWER_MIRRORS to a directory that holds stories260K/" >&2
  exit 1
fi
if (($# == 0)); then set -- -p "Once upon a time" -n 200; fi
exec ./build/src/cli/power run -m "$model" --ctx 512 "$@"
