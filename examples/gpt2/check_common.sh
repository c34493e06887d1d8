# Sourced by serve_check.sh and refusal_check.sh: the fixture skip rule and file checks.
# require_fixture FILE: exits 77 (skip) when FILE is absent, or 1 under CI=true.
require_fixture() {
  if [[ ! -f "$1" ]]; then
    if [[ "${CI:-}" == "true" ]]; then
      echo "CI=true but the gpt2 fixtures are missing: $(dirname "$1")" >&2
      exit 1
    fi
    echo "gpt2 fixtures not found at $(dirname "$1"); skipping" >&2
    exit 77
  fi
}
# require_files FILE...: exits 1 naming the first that does not exist.
require_files() {
  for f in "$@"; do
    [[ -e "$f" ]] || { echo "not found: $f" >&2; exit 1; }
  done
}
