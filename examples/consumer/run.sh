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

for way in find_package add_subdirectory fetchcontent; do
  echo "--- consumer via $way"
  cmake -S "$src/examples/consumer" -B "$work/$way" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHLLM_CONSUME=$way -DHLLM_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
  cmake --build "$work/$way" >/dev/null
  "$work/$way/consumer" "$model"
  passed=$((passed + 1))
done

# Without CMake: the installed headers (nlohmann-json's are the system's), one command line.
echo "--- consumer via the command line"
"${CXX:-g++}" -std=c++20 -O2 -I"$work/prefix/include" "$src/examples/consumer/main.cpp" \
  "$src/examples/consumer/kernels.cpp" -pthread -o "$work/consumer-cli"
"$work/consumer-cli" "$model"
passed=$((passed + 1))
echo "consumers: $passed passed, 0 failed"
