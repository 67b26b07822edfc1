#!/usr/bin/env bash
# Checks hllm's logits on SmolLM2-135M-Instruct against an independent float64 evaluation of its
# dequantized weights (tools/check_smollm2.py): fetches the GGUF if missing, builds hllm-logits and
# hllm-tokenize if missing, and runs the check. Needs /usr/bin/python3 with numpy.
#
#   tools/check_smollm2.sh [extra check_smollm2.py options, e.g. --per-layer or -t 2]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
model="models/smollm2-135m-instruct.gguf"
build="build/release"

if [[ ! -s "$model" ]]; then
  tools/fetch_smollm2.sh "$model"
fi

if [[ ! -x "$build/examples/hllm-logits" || ! -x "$build/examples/hllm-tokenize" ]]; then
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake --preset release
  fi
  cmake --build "$build" --target hllm-logits hllm-tokenize
fi

python=/usr/bin/python3
if ! "$python" -c 'import numpy' 2>/dev/null; then
  python=python3
fi
exec "$python" tools/check_smollm2.py --model "$model" --build "$build" "$@"
