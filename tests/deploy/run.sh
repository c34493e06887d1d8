#!/usr/bin/env bash
# ctest entry for the deploy/ schema checks (deploy.test.mjs): builds tests/deploy/helm_render
# with Debian's Go and Sprig, then runs the checks with the npm modules of this directory
# (npm ci here; scripts/test.sh runs it). Skips (exit 77) when a tool is missing on a user's
# machine; fails under CI=true.
set -uo pipefail
cd "$(dirname "$0")"
SKIP_WHAT="deploy check"
source ../skip_or_fail.sh
command -v node >/dev/null || skip "node not found"
command -v go >/dev/null || skip "go not found (apt-get install golang-go)"
[[ -d /usr/share/gocode/src/github.com/Masterminds/sprig ]] ||
  skip "Sprig not found (apt-get install golang-github-masterminds-sprig-dev)"
for m in kubernetes-models @kubernetes-models/prometheus-operator yaml ajv; do
  [[ -d node_modules/$m ]] || skip "node_modules/$m missing (run: npm ci in tests/deploy)"
done
out="${POWER_HELM_RENDER_DIR:-$(mktemp -d)}"
mkdir -p "$out"
(cd helm_render && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$out/gocache" \
  go build -o "$out/helm_render" .) || { echo "deploy check: helm_render did not build" >&2; exit 1; }
export POWER_HELM_RENDER="$out/helm_render"
exec node --test deploy.test.mjs
