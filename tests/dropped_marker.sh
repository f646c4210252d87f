#!/usr/bin/env bash
# The dropped-marker program (tests/dropped_marker.c): with -Werror it does
# not build; without, compiling its pipeline fails with a message that says
# which stage is empty and the likely cause.
#   dropped_marker.sh CC SOURCE_DIR LIBRARY
set -uo pipefail
cc=$1 src=$2 lib=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-std=c11 -I "$src/include" "$src/tests/dropped_marker.c" -o "$tmp/prog" "$lib" -lm -lpthread)
if "$cc" -Wall -Werror "${flags[@]}" 2>"$tmp/err"; then
  echo "FAIL: the program with a dropped marker built with -Werror"; exit 1
fi
grep -q "mpmd_enter_stage" "$tmp/err" || { echo "FAIL: the -Werror build failed, but not on the marker:"; cat "$tmp/err"; exit 1; }
echo "ok: -Werror refuses it: $(grep -m1 'mpmd_enter_stage' "$tmp/err")"
"$cc" "${flags[@]}" 2>/dev/null || { echo "FAIL: the program does not build without -Werror"; exit 1; }
out=$(LD_LIBRARY_PATH=$(dirname "$lib") "$tmp/prog" 2>&1); rc=$?
if [ "$rc" -ne 1 ] || ! grep -q "stage 0 of 2 has no operations" <<<"$out" || ! grep -q "h = mpmd_enter_stage" <<<"$out"; then
  echo "FAIL: compiling its pipeline: exit $rc: $out"; exit 1
fi
echo "ok: at plan time: $out"
