#!/usr/bin/env bash
# A process that may not start the threads a step needs (ulimit -u, a
# container's pids limit) gets an error naming the option when the step is
# compiled, instead of OpenMP ending it from inside a kernel ("Thread
# creation failed").
#   thread_budget.sh PATH/TO/gpt
# The limit is set for an unprivileged user (root ignores it): as root, gpt
# runs as nobody with at most 6 processes; otherwise the test is skipped.
set -uo pipefail
gpt=$1
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv >/dev/null; then
  echo "skipped: needs root and setpriv to run gpt as another user under a process limit"; exit 77
fi
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
if ! as_nobody test -x "$gpt"; then
  echo "skipped: user nobody cannot run $gpt (a folder on the way is private)"; exit 77
fi
model=(--layers 2 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 1)
fail=0
# LeakSanitizer needs a thread of its own at exit: not under this limit
export ASAN_OPTIONS=detect_leaks=0
for args in "--schedule gpipe --stages 2 --threads 8" "--threads 8"; do
  out=$(as_nobody bash -c 'ulimit -u 6; exec "$@"' _ "$gpt" "${model[@]}" $args 2>&1); rc=$?
  if [ "$rc" -eq 1 ] && grep -q "but this process could start only" <<<"$out" &&
     grep -q "lower threads_per_rank" <<<"$out" && grep -q -- "--threads N" <<<"$out"; then
    echo "ok: gpt $args under ulimit -u 6: exit $rc: $out"
  else
    echo "FAIL: gpt $args under ulimit -u 6: exit $rc: $out"; fail=1
  fi
done
# the same runs with room for their threads train
out=$(as_nobody bash -c 'ulimit -u 64; exec "$@"' _ "$gpt" "${model[@]}" --schedule gpipe --stages 2 --threads 8 2>&1); rc=$?
if [ "$rc" -eq 0 ] && grep -q "final_loss=" <<<"$out"; then
  echo "ok: with room for 16 threads it trains"
else
  echo "FAIL: under ulimit -u 64: exit $rc: $out"; fail=1
fi
exit "$fail"
