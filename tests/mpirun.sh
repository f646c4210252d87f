#!/usr/bin/env bash
# Run a test program under mpirun on this machine.
#   mpirun.sh shm|tcp NPROC PROGRAM [ARGS...]
# shm: the default transports (shared memory between local processes);
# tcp: TCP only (--mca btl tcp,self), over loopback, which is what a network
# between machines looks like to MPI. Oversubscribed (more processes than
# cores is fine here) and unbound (each process runs its own threads).
set -euo pipefail
transport=$1 np=$2
shift 2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
flags=(--oversubscribe --bind-to none -np "$np")
case "$transport" in
  shm) flags+=(--mca btl self,vader) ;;
  tcp) flags+=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo) ;;
  *) echo "mpirun.sh: transport must be shm or tcp, got '$transport'" >&2; exit 2 ;;
esac
# the sanitizer build's MPI tests: a preload for the rank processes only
# (tests/CMakeLists.txt, MPMD_MPI_TEST_ENV), not for mpirun
if [ -n "${MPMD_MPI_PRELOAD:-}" ]; then flags+=(-x "LD_PRELOAD=$MPMD_MPI_PRELOAD"); fi
exec mpirun "${flags[@]}" "$@"
