#!/usr/bin/env bash
# Power's main job on a real model. Until `power serve` exists (issue #7) this builds Power and
# inspects the stories260K GGUF from the mirror directory: POWER_MIRRORS (a directory holding
# stories260K/), defaulting to ../shared/models next to this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DPOWER_BUILD_TESTS=OFF
mirror=${POWER_MIRRORS:-$(cd .. && pwd)/shared/models}
model=$mirror/stories260K/stories260K-F32.gguf
if [[ ! -f "$model" ]]; then
  echo "run: $model not found; set POWER_MIRRORS to a directory that holds stories260K/" >&2
  exit 1
fi
./build/src/cli/power inspect "$model"
