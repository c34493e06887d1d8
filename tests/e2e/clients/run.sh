#!/usr/bin/env bash
# ctest entry for the client e2e tests (the OpenAI and Ollama JavaScript clients, a browser, the web console): skips (exit 77) when Node.js or the npm modules
# are missing on a user's machine, fails under CI=true. Modules come from `npm ci` in this
# directory (scripts/test.sh runs it).
set -uo pipefail
cd "$(dirname "$0")"
SKIP_WHAT="openai e2e"
source ../../skip_or_fail.sh
command -v node >/dev/null || skip "node not found"
for m in openai ollama playwright-core; do
  [[ -d node_modules/$m ]] || skip "node_modules/$m missing (run: npm ci in tests/e2e/clients)"
done
[[ -f "${POWER_SHARED_DIR:-}/models/stories260K/stories260K-F32.gguf" ]] ||
  skip "stories260K not found under POWER_SHARED_DIR=${POWER_SHARED_DIR:-}"
# The OpenAI suite runs twice: over tcp, and over a unix-socket-only server (--listen unix://).
POWER_E2E_TRANSPORT=unix node --test --test-concurrency=1 openai.test.mjs confidential.test.mjs || exit 1
exec node --test --test-concurrency=1 openai.test.mjs ollama.test.mjs browser.test.mjs console.test.mjs
