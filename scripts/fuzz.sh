#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) into build-fuzz/ and runs each for a
# bounded time: scripts/fuzz.sh [SECONDS_PER_TARGET]. Fails if a target finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPOWER_FUZZ=ON -DPOWER_BUILD_TESTS=OFF -DPOWER_WITH_STORE=OFF >/dev/null
mapfile -t targets < <(cmake --build build-fuzz --target help | sed -n 's/^\([a-z0-9_]*_fuzz\):.*/\1/p')
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
mkdir -p build-fuzz/artifacts
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  seeds=fuzz/corpus/${t%_fuzz}
  args=("$corpus")
  [[ -d "$seeds" ]] && args+=("$seeds")
  echo "fuzz: $t for ${seconds}s"
  "build-fuzz/fuzz/$t" -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/artifacts/ "${args[@]}" 2>&1 | tail -n 12
done
