#!/usr/bin/env bash
# The image stage of scripts/test.sh: builds the container image (deploy/image/build-image.sh)
# and has it serve stories260K. Skipped, with the reason, where it cannot run: not root
# (debootstrap and chroot need it) or no ../shared model; under CI=true a missing model fails.
set -uo pipefail
cd "$(dirname "$0")/.."
shared="${POWER_SHARED_DIR:-$(pwd)/../shared}"
model="$shared/models/stories260K/stories260K-F32.gguf"
if [[ $(id -u) -ne 0 ]]; then
  echo "image: skipped: debootstrap and chroot need root (run deploy/image/build-image.sh as root)"
  exit 0
fi
if [[ ! -f "$model" ]]; then
  if [[ "${CI:-}" == "true" ]]; then echo "image: $model missing (CI=true: failing)" >&2; exit 1; fi
  echo "image: skipped: no stories260K under $shared"
  exit 0
fi
exec bash deploy/image/build-image.sh --tag localhost/power:test --test "$model"
