#!/usr/bin/env bash
# The model SDK from the outside (issue #21): installs this tree's build (public headers,
# static libraries, the CMake package Power, the power binary) into build/install, builds
# examples/gpt2 as a separate CMake project against that install tree with
# find_package(Power CONFIG REQUIRED), and runs its tests: GPT-2 registered in process and
# checked against the peer's fixtures (logits and greedy ids), served by the installed, unmodified
# `power serve --model-lib libpower_gpt2.so` over the OpenAI API, and a plugin built against
# another SDK version refused. Needs a finished build in build/ (scripts/test.sh's build stage).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$PWD/build/install
rm -rf "$prefix"
cmake --install build --prefix "$prefix" >/dev/null
shared=${POWER_SHARED_DIR:-$PWD/../shared}
cmake -S examples/gpt2 -B build/gpt2 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix" -DGPT2_FIXTURES="$shared/fixtures/models/gpt2" >/dev/null
cmake --build build/gpt2 -j"$(nproc)"
ctest --test-dir build/gpt2 --output-on-failure
