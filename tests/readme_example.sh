#!/usr/bin/env bash
# README's first example is the one include/mpmd.h opens with (the same
# lines), and it compiles, links against the built library and trains: its
# pipelined step's loss equals the one-rank loop's of the same graph, bit
# for bit, and two steps lower it.
#   readme_example.sh BUILD_DIR SOURCE_DIR C_COMPILER
set -uo pipefail
build=$1 src=$2 cc=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
sed -n '/^## A training step, pipelined$/,/^```$/p' "$src/README.md" | sed -n '/^```c$/,/^```$/p' | sed '1d;$d' >"$work/readme.c"
[ -s "$work/readme.c" ] || { echo "FAIL: no example under README's \"A training step, pipelined\""; exit 1; }
# the header's: the comment's indented lines from the first code line to the
# last, its empty comment lines between them empty
sed -n '/^ \* A step in brief/,/^ \* The same graph runs unpipelined/p' "$src/include/mpmd.h" |
  sed -n 's/^ \*     //p; s/^ \*$//p' | sed '/./,$!d' | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$work/header.c"
if diff -u "$work/readme.c" "$work/header.c" >"$work/diff"; then
  echo "ok: include/mpmd.h opens with README's example, line for line"
else
  echo "FAIL: include/mpmd.h's example differs from README's:"; cat "$work/diff"; fail=1
fi
{
  echo '#include <math.h>'
  echo '#include <stdio.h>'
  grep '^#include' "$work/readme.c"
  echo 'int main(void) {'
  echo '    static float xdata[64 * 16], ydata[64];'
  echo '    for (int i = 0; i < 64 * 16; i++) xdata[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;'
  echo '    for (int i = 0; i < 64; i++) ydata[i] = (float)((i * 11) % 7) / 7.0f;'
  grep -v '^#include' "$work/readme.c"
  cat <<'C'
    if (!st) { fprintf(stderr, "step: %s\n", err.msg); return 1; }
    mpmd_step *loop = mpmd_jit_with_loop(g, NULL, NULL, &err); /* the same graph, unpipelined */
    if (!loop) { fprintf(stderr, "loop: %s\n", err.msg); return 1; }
    float l2, m1, m2;
    mpmd_step_set_input(loop, x, xdata, sizeof xdata);
    mpmd_step_set_input(loop, y, ydata, sizeof ydata);
    if (mpmd_step_run(loop) || mpmd_step_read(loop, total, &m1, sizeof m1)) return 1;
    if (mpmd_step_run(st) || mpmd_step_read(st, total, &l2, sizeof l2)) return 1;
    if (mpmd_step_run(loop) || mpmd_step_read(loop, total, &m2, sizeof m2)) return 1;
    printf("pipelined %.9g %.9g, loop %.9g %.9g\n", l, l2, m1, m2);
    if (!(isfinite(l) && l == m1 && l2 == m2 && l2 < l)) return 1;
    mpmd_step_free(loop), mpmd_step_free(st), mpmd_schedule_free(sched), mpmd_graph_free(g);
    return 0;
}
C
} >"$work/main.c"
if ! "$cc" -std=c11 -Wall -Werror -I"$src/include" "$work/main.c" -o "$work/example" -L"$build" -lmpmd -lm \
  -Wl,-rpath,"$build" 2>"$work/cc.log"; then
  echo "FAIL: README's example does not compile:"; cat "$work/cc.log"; nl -ba "$work/main.c" | head -60; exit 1
fi
if out=$("$work/example" 2>&1); then
  echo "ok: README's example trains, the pipelined loss the loop's bit for bit: $out"
else
  echo "FAIL: README's example: $out"; fail=1
fi
exit $fail
