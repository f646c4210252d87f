#!/usr/bin/env bash
# Checkpoints under mpirun: a step saved by 2 MPI processes (gathered, written
# by process 0) is byte for byte the file an in-process 2-rank step writes
# (and so is a snapshot's, mpmd_step_snapshot, which only process 0 writes;
# mpmd_mpi_any agrees on flags some processes raise), and resuming it under
# mpirun ends with the final line of a run that never stopped.
#   checkpoint_mpi.sh TEST_CHECKPOINT SOURCE_DIR
set -euo pipefail
bin=$1 src=$2
"$bin" --mpi-available || { echo "checkpoint_mpi: this build has no MPI runtime"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$src/tests/mpirun.sh" shm 2 "$bin" --mpi-save "$tmp/mpi.safetensors" >/dev/null
"$bin" --local-save "$tmp/local.safetensors" >/dev/null
if ! cmp "$tmp/mpi.safetensors" "$tmp/local.safetensors"; then
  echo "FAIL: the file saved under mpirun differs from the in-process one"
  exit 1
fi
straight=$("$bin" --straight | tail -n 1)
resumed=$("$src/tests/mpirun.sh" shm 2 "$bin" --mpi-resume "$tmp/mpi.safetensors" | tail -n 1)
if [ "$straight" != "$resumed" ]; then
  echo "FAIL: resumed under mpirun: $resumed"
  echo "      never stopped:        $straight"
  exit 1
fi
echo "checkpoint_mpi: ok ($resumed)"
