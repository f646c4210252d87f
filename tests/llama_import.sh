#!/usr/bin/env bash
# llama --init-from against an independent PyTorch LLaMA in float64
# (tests/llama_import.py says what is checked).
#   llama_import.sh LLAMA SOURCE_TESTS_DIR
# Debian's python3-torch lives with Debian's own interpreter: /usr/bin/python3.
set -euo pipefail
llama=$1 here=$2
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "llama_import: $py cannot import torch and numpy: install python3-torch and python3-numpy (make deps does)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$here/llama_import.py" "$llama" "$tmp"
