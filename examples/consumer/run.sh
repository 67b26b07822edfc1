#!/usr/bin/env bash
# Builds and runs examples/consumer against this checkout in all three ways.
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake -S "$src" -B "$work/hllm-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHLLM_BUILD_TESTS=OFF -DHLLM_BUILD_BENCHMARKS=OFF -DHLLM_BUILD_EXAMPLES=OFF >/dev/null
cmake --install "$work/hllm-build" --prefix "$work/prefix" >/dev/null

for way in find_package add_subdirectory fetchcontent; do
  echo "--- consumer via $way"
  cmake -S "$src/examples/consumer" -B "$work/$way" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHLLM_CONSUME=$way -DHLLM_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
  cmake --build "$work/$way" >/dev/null
  "$work/$way/consumer"
done
echo "consumers: 3 passed, 0 failed"
