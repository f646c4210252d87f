#!/usr/bin/env bash
# mpmd against PyTorch in float64: reference_dump writes, torch_reference.py
# checks (see there for the tolerances).
#   torch_reference.sh REFERENCE_DUMP SOURCE_TESTS_DIR
# Debian's python3-torch lives with Debian's own interpreter: /usr/bin/python3.
set -euo pipefail
dump=$1 here=$2
py=/usr/bin/python3
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "torch_reference: $py cannot import torch and numpy: install python3-torch and python3-numpy (make deps does)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$dump" "$tmp"
"$py" "$here/torch_reference.py" "$tmp"
