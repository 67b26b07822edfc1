#!/usr/bin/env bash
# The README's first command: installs what is missing, builds the examples (release) and runs
# hllm-generate. Extra arguments go to hllm-generate (e.g. -p "And God said" -n 64).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target hllm-generate
exec ./build/release/examples/hllm-generate "$@"
