#!/usr/bin/env bash
# Installs the Debian packages hllm's build, tests and examples need, if any are missing.
# Runs apt-get only when something is absent, so a second run is instant. Needs root or sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config     # toolchain
  libeigen3-dev                        # Eigen 3.4: reference code in tests
  libgtest-dev                         # GoogleTest
  libbenchmark-dev                     # Google Benchmark
  nlohmann-json3-dev                   # config.json of Hugging Face checkpoints
  libcli11-dev                         # CLI11: the example programs' command lines
  python3 python3-sentencepiece        # tokenizer cross-check against SentencePiece
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
echo "install_deps: installing ${missing[*]}"
"${sudo_cmd[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
