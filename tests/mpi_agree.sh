#!/usr/bin/env bash
# The processes of one MPI job check that they built the same step: a
# process started with another --lr, --seed, --width, --heads or schedule
# than the others is named, with what differs, before anything runs (and
# never trains a model no configuration gives, or dies in MPI_ERR_TRUNCATE).
# mpirun's MPMD form gives each process its own command line.
#   mpi_agree.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
gpt="$build/examples/gpt"
run() { "$src/tests/mpirun.sh" shm 1 "$@" 2>&1 </dev/null; }
model=(--layers 2 --width 32 --heads 2 --seq 16 --batch 4 --microbatches 2 --steps 2 --quiet --runtime mpi
  --schedule std1f1b --stages 2)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
# case NAME EXPECTED-TEXT OPTIONS-OF-PROCESS-1...
case_() {
  local name=$1 want=$2
  shift 2
  out=$(run "$gpt" "${model[@]}" : -np 1 "$gpt" "${model[@]}" "$@")
  rc=$?
  if [ $rc -ne 0 ] && grep -q "built different steps: process 1 differs from process 0 in $want" <<<"$out" &&
    ! grep -q "MPI_ERR_TRUNCATE\|final_loss=" <<<"$out"; then
    ok "$name: refused, naming process 1 and $want"
  else
    bad "$name: exit $rc: $out"
  fi
}
case_ "another --lr" "its graph, from %" --lr 0.004
case_ "another --width" "its graph" --width 48
case_ "another --heads" "its graph, from %" --heads 4
case_ "another --seed" "the step's options (here seed 9" --seed 9
case_ "another schedule" "the schedule (here GPipe" --schedule gpipe
out=$(run "$gpt" "${model[@]}" : -np 1 "$gpt" "${model[@]}")

grep -q "^final_loss=" <<<"$out" && ok "the same command line on both: trains: $(tail -n 1 <<<"$out")" ||
  bad "the same command line: $out"
echo "mpi_agree: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
