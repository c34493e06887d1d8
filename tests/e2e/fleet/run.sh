#!/usr/bin/env bash
# ctest entry for the fleet test (docs/DEPLOY.md): three `power serve` replicas behind Debian's
# HAProxy and nginx, scraped by Debian's Prometheus, on loopback. Skips (exit 77) on a user's
# machine without those packages or without ../shared; fails under CI=true.
set -uo pipefail
cd "$(dirname "$0")"
SKIP_WHAT="fleet e2e"
source ../../skip_or_fail.sh
# haproxy and nginx live in /usr/sbin, which a non-root PATH may lack.
export PATH="$PATH:/usr/sbin:/sbin"
command -v node >/dev/null || skip "node not found"
for t in haproxy nginx prometheus; do
  command -v "$t" >/dev/null || skip "$t not found (bash scripts/setup.sh installs it)"
done
[[ -f "$POWER_SHARED_DIR/models/stories260K/stories260K-F32.gguf" ]] ||
  skip "stories260K not found under POWER_SHARED_DIR=$POWER_SHARED_DIR"
exec node --test --test-concurrency=1 fleet.test.mjs
