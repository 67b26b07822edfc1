#!/bin/sh
# Rebuild the bundled KJV model from scratch: text + tokenizer, training, reference outputs,
# export to models/kjv-llama.gguf.
#   tools/train/run_all.sh                                  # plan the schedule from the clock (40 min)
#   tools/train/run_all.sh --steps N --decay-start S        # reproduce a logged run exactly
# Extra arguments go to train.py. Needs Debian's python3-torch, python3-numpy,
# python3-sentencepiece and the bible-kjv package. CPU only, one thread.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
WORK=${KJV_WORK_DIR:-/tmp/kjv-train}
if ! command -v bible >/dev/null 2>&1; then
  echo "the 'bible' program is missing: apt-get install -y bible-kjv" >&2
  exit 1
fi
"$PY" tools/train/prepare_data.py --work-dir "$WORK"
"$PY" tools/train/train.py --work-dir "$WORK" "$@"
"$PY" tools/train/reference_outputs.py
# Export to llama2.c's format and convert with our GGUF writer into the bundled model.
"$PY" tools/train/export_model.py --out "$WORK"
cmake --preset release >/dev/null && cmake --build --preset release --target hllm-convert >/dev/null
build/release/examples/hllm-convert -i "$WORK/kjv-llama.bin" --tokenizer "$WORK/tokenizer.bin" \
  --type f16 -o models/kjv-llama.gguf
