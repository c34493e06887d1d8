#!/usr/bin/env bash
# Power's main job: build Power, provision a small real model through the artifact store, and
# serve it over the OpenAI-compatible API (`power serve`), printing the URL.
#   POWER_MIRRORS  mirror directory holding stories260K/ (default ../shared/models next to this
#                  checkout); the file is pulled pinned to its SHA-256, so whatever the mirror
#                  holds is verified before it is used.
#   POWER_HOME     the store (default ~/.power); POWER_PORT (default 8080), POWER_HOST_ADDR
#                  (default 127.0.0.1).
# Extra arguments go to `power serve` (e.g. --api-key-file keys.txt). Stop with Ctrl-C: the
# server drains running requests and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DPOWER_BUILD_TESTS=OFF
power=./build/src/cli/power
mirror=${POWER_MIRRORS:-$(cd .. && pwd)/shared/models}
model_file=stories260K-F32.gguf
model_sha256=047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b
source_path=$mirror/stories260K/$model_file
if [[ ! -f "$source_path" ]]; then
  echo "run: $source_path not found; set POWER_MIRRORS to a directory that holds stories260K/" >&2
  exit 1
fi
# Pinned pull: reuses the blob when the store has it, else copies and verifies it.
"$power" pull "$source_path" --sha256 "$model_sha256" --name stories260K --progress none
echo "run: serving stories260K; try:"
port=${POWER_PORT:-8080}
host=${POWER_HOST_ADDR:-127.0.0.1}
echo "  curl http://$host:$port/v1/chat/completions -H 'Content-Type: application/json' \\"
echo "       -d '{\"model\":\"stories260K\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}'"
exec "$power" serve --host "$host" --port "$port" -m stories260K --ctx 512 "$@"
