#!/usr/bin/env bash
# Create the Python environment used by tools/gen_goldens.py.
#
#   tools/setup_python.sh && .venv-tools/bin/python tools/gen_goldens.py
#
# The venv (default: .venv-tools at the repository root, override with VENV=...)
# is built on Debian's /usr/bin/python3 with --system-site-packages, so it sees
# Debian's python3-torch and python3-numpy; transformers and friends come from
# PyPI, pinned in tools/requirements.txt. Idempotent: does nothing when the venv
# already holds exactly tools/requirements.txt (tracked by a stamp file).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv-tools}"
REQ="tools/requirements.txt"
SYS_PY=/usr/bin/python3
STAMP="$VENV/.requirements.stamp"

# Debian-provided packages (torch, numpy, venv support).
if ! "$SYS_PY" -c 'import torch, numpy, venv, ensurepip' >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup_python: installing Debian packages python3-torch python3-numpy python3-venv"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-torch python3-numpy python3-venv
    else
        echo "setup_python: need Debian's python3-torch, python3-numpy and python3-venv" >&2
        echo "  (apt-get install python3-torch python3-numpy python3-venv)" >&2
        exit 1
    fi
fi

# Already set up with the same requirements? Then nothing to do.
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && cmp -s "$REQ" "$STAMP" \
   && "$VENV/bin/python" -c 'import torch, transformers' >/dev/null 2>&1; then
    echo "setup_python: $VENV is up to date"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup_python: creating $VENV"
    "$SYS_PY" -m venv --system-site-packages "$VENV"
fi
echo "setup_python: installing $REQ"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -r "$REQ"
"$VENV/bin/python" -c 'import torch, transformers; print("setup_python: torch", torch.__version__, "transformers", transformers.__version__)'
cp "$REQ" "$STAMP"
