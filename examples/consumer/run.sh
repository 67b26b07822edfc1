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

# Each build is one long compile (the kernels' translation unit) and a short one: the four run
# two at a time, so that both cores of a small machine work; each logs to its own file, shown
# when it fails.
build_way() {
  local way=$1
  cmake -S "$src/examples/consumer" -B "$work/$way" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHLLM_CONSUME="$way" -DHLLM_SOURCE_DIR="$src" -DCMAKE_PREFIX_PATH="$work/prefix" &&
    cmake --build "$work/$way"
}
# Without CMake: the installed headers (nlohmann-json's are the system's), one command line.
build_cli() {
  "${CXX:-g++}" -std=c++20 -O2 -I"$work/prefix/include" "$src/examples/consumer/main.cpp" \
    "$src/examples/consumer/kernels.cpp" -pthread -o "$work/consumer-cli"
}
wait_for() {
  local way=$1 pid=$2
  wait "$pid" || { cat "$work/$way.log"; echo "consumer via $way: build FAILED"; exit 1; }
}
build_way find_package >"$work/find_package.log" 2>&1 & first=$!
build_way add_subdirectory >"$work/add_subdirectory.log" 2>&1 & second=$!
wait_for find_package $first
wait_for add_subdirectory $second
build_way fetchcontent >"$work/fetchcontent.log" 2>&1 & first=$!
build_cli >"$work/command line.log" 2>&1 & second=$!
wait_for fetchcontent $first
wait_for "command line" $second

for way in find_package add_subdirectory fetchcontent; do
  echo "--- consumer via $way"
  "$work/$way/consumer" "$model"
  passed=$((passed + 1))
done
echo "--- consumer via the command line"
"$work/consumer-cli" "$model"
passed=$((passed + 1))
echo "consumers: $passed passed, 0 failed"
