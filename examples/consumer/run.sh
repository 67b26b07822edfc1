#!/usr/bin/env bash
# Builds and runs examples/consumer against this checkout in all four ways: CMake's
# find_package (after an install), add_subdirectory and FetchContent, and a plain compiler
# command line without CMake (kernels.cpp: the one translation unit that includes
# hllm/implementation.hpp).
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
model="$src/models/kjv-llama.gguf"

cmake -S "$src" -B "$work/hllm-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHLLM_BUILD_TESTS=OFF -DHLLM_BUILD_BENCHMARKS=OFF -DHLLM_BUILD_EXAMPLES=OFF >/dev/null
cmake --install "$work/hllm-build" --prefix "$work/prefix" >/dev/null

# The four builds run two at a time, so that both cores of a small machine work (the command
# line's is one long compile, the whole hllm/implementation.hpp); each logs to its own file,
# shown when it fails.
build() {
  local way=$1
  if [ "$way" = "command line" ]; then
    # Without CMake: the installed headers (nlohmann-json's are the system's), one command line.
    "${CXX:-g++}" -std=c++20 -O2 -I"$work/prefix/include" "$src/examples/consumer/main.cpp" \
      "$src/examples/consumer/kernels.cpp" -pthread -o "$work/consumer-cli"
  else
    cmake -S "$src/examples/consumer" -B "$work/$way" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DHLLM_CONSUME="$way" -DHLLM_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$work/prefix" &&
      cmake --build "$work/$way"
  fi >"$work/$way.log" 2>&1
}
built() {
  local way=$1 status=$2
  [ "$status" -eq 0 ] || { cat "$work/$way.log"; echo "consumer via $way: build FAILED"; exit 1; }
}
# shellcheck source=tools/two_at_a_time.sh
source "$src/tools/two_at_a_time.sh"
two_at_a_time build built find_package add_subdirectory fetchcontent "command line"

for way in find_package add_subdirectory fetchcontent; do
  echo "--- consumer via $way"
  "$work/$way/consumer" "$model"
  passed=$((passed + 1))
done
echo "--- consumer via the command line"
"$work/consumer-cli" "$model"
passed=$((passed + 1))
echo "consumers: $passed passed, 0 failed"
