#!/usr/bin/env bash
# ctest entry for the web console's JavaScript unit tests (node's test runner, no npm modules):
# skips (exit 77) without Node.js on a user's machine, fails under CI=true.
set -uo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null; then
  if [[ "${CI:-}" == "true" ]]; then echo "ui tests: node not found (CI=true: failing)" >&2; exit 1; fi
  echo "ui tests: node not found; skipping" >&2
  exit 77
fi
if [[ -z "${POWER_SHARED_DIR:-}" ]]; then POWER_SHARED_DIR="$(cd ../.. && pwd)/../shared"; fi
export POWER_SHARED_DIR
exec node --test receipt.test.mjs metrics.test.mjs
