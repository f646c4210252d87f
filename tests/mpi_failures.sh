#!/usr/bin/env bash
# A failing, killed or stopped rank must end the whole MPI job, every
# process, within 30 seconds (a stopped one: the watchdog's deadline plus a
# few seconds), with a message that names the rank and the cause.
#   mpi_failures.sh PATH/TO/mpi_check
set -uo pipefail
prog=$1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp)
trap 'rm -f "$out"; pkill -CONT -f "$prog --forever" 2>/dev/null; pkill -9 -f "$prog --forever" 2>/dev/null || true' EXIT
fail=0

# 1. A task fails on rank 1 (a label outside the vocabulary).
start=$(date +%s)
timeout 60 "$here/mpirun.sh" shm 2 "$prog" --fail >"$out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$took" -gt 30 ]; then
  echo "FAIL: a failing rank: exit $rc after ${took}s"; fail=1
elif ! grep -q "rank 1" "$out" || ! grep -q "4242" "$out"; then
  echo "FAIL: a failing rank: the message does not name rank 1 and the bad label:"; cat "$out"; fail=1
else
  echo "ok: a failing rank ended the job in ${took}s (exit $rc): $(grep -m1 'rank 1' "$out")"
fi

# Start a 2-rank job that trains until stopped (extra options: "$@") and
# wait for its first step. Sets job (mpirun) and victim: the last rank's own
# process, whose command line starts with the program (mpirun's and the
# wrapper's only contain it).
start_forever() {
  : >"$out" # emptied here: the job's own redirection may come after the wait below starts reading
  "$here/mpirun.sh" shm 2 "$prog" --forever "$@" >"$out" 2>&1 &
  job=$!
  for _ in $(seq 300); do grep -q "^step 0" "$out" 2>/dev/null && break; sleep 0.1; done
  victim=$(pgrep -f "^$prog --forever" | tail -n 1)
}
# Wait up to 30 s for the job to end: fails if it still runs; otherwise sets
# rc (its exit status), took (seconds since the call) and left (rank
# processes still alive).
wait_end() {
  start=$(date +%s)
  for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then return 1; fi
  wait "$job"; rc=$?
  took=$(( $(date +%s) - start ))
  left=$(pgrep -f "^$prog --forever" | wc -l)
  return 0 # (pgrep finding nothing fails the pipeline above)
}

# 2. A rank is killed mid-run.
start_forever
if [ -z "$victim" ]; then
  echo "FAIL: the training job did not start:"; cat "$out"; exit 1
fi
kill -9 "$victim"
if ! wait_end; then
  echo "FAIL: the job still runs 30 s after a rank was killed"; kill -9 "$job"; fail=1
else
  if [ "$rc" -eq 0 ] || [ "$left" -ne 0 ]; then
    echo "FAIL: after a kill: exit $rc, $left processes left"; fail=1
  elif ! grep -Eqi "signal 9|killed" "$out"; then
    echo "FAIL: after a kill, no message names the cause:"; cat "$out"; fail=1
  else
    echo "ok: a killed rank ended the job in ${took}s (exit $rc): $(grep -Ei -m1 'signal 9|killed' "$out")"
  fi
fi
# 3. A rank stops without dying (SIGSTOP: a hung device or a swapped-out
# node looks the same to its peers): the watchdog (3 s here) must end the
# job with a message naming the stopped rank and what was awaited.
start_forever --step-timeout 3
vrank=$(tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
if [ -z "$victim" ] || [ -z "$vrank" ]; then
  echo "FAIL: the training job did not start (or its rank is unknown):"; cat "$out"; exit 1
fi
kill -STOP "$victim"
if ! wait_end; then
  echo "FAIL: the job still runs 30 s after rank $vrank was stopped (the watchdog is 3 s):"; cat "$out"
  kill -CONT "$victim"; kill -9 "$job"; fail=1
else
  if [ "$rc" -eq 0 ] || [ "$left" -ne 0 ]; then
    echo "FAIL: after a stop: exit $rc, $left processes left"; fail=1
  elif ! grep -Eq "waited [0-9]+(\.[0-9]+)? s for .*rank $vrank" "$out"; then
    echo "FAIL: after a stop, no message names what was awaited from rank $vrank:"; cat "$out"; fail=1
  else
    echo "ok: a stopped rank ended the job in ${took}s (exit $rc): $(grep -Em1 "waited [0-9]+(\.[0-9]+)? s" "$out")"
  fi
fi
[ "$fail" -eq 0 ] && echo "mpi_failures: 3 passed, 0 failed" || echo "mpi_failures: failed"
exit "$fail"
