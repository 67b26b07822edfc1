#!/usr/bin/env bash
# The test command of the README (and of CI): installs what is missing, configures and builds the
# release preset, and runs the whole test suite with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install_deps.sh
cmake --preset release
cmake --build --preset release
ctest --preset release --output-on-failure
