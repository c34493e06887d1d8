# Sourced by the ctest entry scripts that need tools or ../shared (tests/e2e/clients,
# tests/e2e/fleet, tests/deploy). Set SKIP_WHAT to the test's name first.
#   skip REASON   exit 77 (ctest: skipped) on a user's machine; exit 1 under CI=true.
#   POWER_SHARED_DIR defaults to ../shared next to the checkout (as tests/test_util).
skip() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "${SKIP_WHAT}: $1 (CI=true: failing)" >&2
    exit 1
  fi
  echo "${SKIP_WHAT}: $1; skipping" >&2
  exit 77
}
if [[ -z "${POWER_SHARED_DIR:-}" ]]; then
  POWER_SHARED_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared"
fi
export POWER_SHARED_DIR
