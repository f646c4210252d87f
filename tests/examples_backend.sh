#!/usr/bin/env bash
# The GPT example on another backend (make test-gpu runs it with cuda): the
# final line of every schedule of the equivalence list, and of two
# data-parallel replicas, equals the one-rank loop's on that backend; FSDP
# (gathered per task and per step, clipped) equals plain data parallelism;
# tensor parallelism's pipelines equal its loop; the
# loss after a few steps is close to the CPU's (different kernels, so not
# the same bits); and a bad input still ends with a message.
#   examples_backend.sh BUILD_DIR BACKEND
# Exit 77 (skip) when BACKEND cannot run here.
set -uo pipefail
build=$1 backend=$2
gpt="$build/examples/gpt"
model=(--layers 4 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 3 --tie-embeddings --quiet)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

probe=$("$gpt" --layers 1 --width 8 --heads 1 --seq 4 --batch 1 --microbatches 1 --steps 1 --quiet \
  --backend "$backend" 2>&1)
if [ $? -ne 0 ]; then
  echo "examples_backend: skipped: $probe"
  exit 77
fi

# the equivalence list: schedule, stages, ranks, extra options
schedules=$(cat "$(dirname "$0")/equivalence_schedules.txt")
for precision in f32 bf16; do
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision | tail -n 1)
  case "$ref" in final_loss=*" params_sha256="*) ok "$backend $precision loop: $ref" ;;
  *) bad "$backend $precision loop printed: $ref" ;; esac
  while read -r name stages ranks extra; do
    line=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --schedule "$name" --stages "$stages" \
      --ranks "$ranks" $extra 2>&1 | tail -n 1)
    [ "$line" = "$ref" ] && ok "$backend $precision $name S=$stages D=$ranks $extra" ||
      bad "$backend $precision $name S=$stages D=$ranks $extra: $line (loop: $ref)"
  done <<<"$schedules"
done

# the CUDA backend records each rank's runs of kernels once and replays
# them (CUDA graphs); launching kernel by kernel gives the same bits
if [ "$backend" = cuda ]; then
  for extra in "" "--schedule interleaved1f1b --stages 4 --ranks 2" "--schedule zerobubble --stages 4 --ranks 4"; do
    a=$("$gpt" "${model[@]}" --backend cuda --precision bf16 $extra 2>&1 | tail -n 1)
    b=$(MPMD_CUDA_GRAPHS=0 "$gpt" "${model[@]}" --backend cuda --precision bf16 $extra 2>&1 | tail -n 1)
    [ "$a" = "$b" ] && ok "cuda graphs = kernel by kernel ${extra:-(loop)}: $a" ||
      bad "cuda graphs vs kernel by kernel ${extra:-(loop)}: $a / $b"
  done
fi

# the fused attention kernels (the default on the cpu; cuda composes
# attention from cuBLAS products unless asked): a pipeline still gives the
# loop's bits
a=$("$gpt" "${model[@]}" --backend "$backend" --precision bf16 --attention fused 2>&1 | tail -n 1)
b=$("$gpt" "${model[@]}" --backend "$backend" --precision bf16 --attention fused --schedule zerobubble --stages 4 \
  --ranks 4 2>&1 | tail -n 1)
[ "$a" = "$b" ] && ok "$backend bf16 fused attention, zerobubble = loop: $a" ||
  bad "$backend bf16 fused attention, zerobubble vs loop: $b / $a"

# under mpirun (a process per rank, messages through host copies): the
# loop's line again, when this build has MPI and there is an mpirun
probe=$("$gpt" --layers 1 --width 8 --heads 1 --seq 4 --batch 1 --microbatches 1 --steps 1 --quiet \
  --runtime mpi --backend "$backend" 2>&1)
if ! [ -x "$(command -v mpirun)" ] || grep -q "no MPI" <<<"$probe"; then
  echo "skipped: the mpirun cases (this build has no MPI runtime, or there is no mpirun)"
else
  for precision in f32 bf16; do
    ref=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision | tail -n 1)
    line=$("$(dirname "$0")/mpirun.sh" shm 2 "$gpt" "${model[@]}" --backend "$backend" --precision $precision \
      --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
    [ "$line" = "$ref" ] && ok "$backend $precision mpirun -np 2 std1f1b: $line" ||
      bad "$backend $precision mpirun -np 2 std1f1b: $line (loop: $ref)"
  done
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision f32 --data-parallel 2 | tail -n 1)
  line=$("$(dirname "$0")/mpirun.sh" shm 2 "$gpt" "${model[@]}" --backend "$backend" --precision f32 \
    --data-parallel 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "$backend mpirun -np 2, loop x 2 replicas: $line" ||
    bad "$backend mpirun -np 2, loop x 2 replicas: $line (in-process: $ref)"
  # the model axis across processes (its inputs through host copies), and
  # FSDP's shards with a clip
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision bf16 --tensor-parallel 2 | tail -n 1)
  line=$("$(dirname "$0")/mpirun.sh" shm 4 "$gpt" "${model[@]}" --backend "$backend" --precision bf16 \
    --tensor-parallel 2 --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "$backend mpirun -np 4, std1f1b x tensor parallel 2: $line" ||
    bad "$backend mpirun -np 4, tensor parallel 2: $line (in-process loop: $ref)"
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision bf16 --data-parallel 2 --clip 0.05 | tail -n 1)
  line=$("$(dirname "$0")/mpirun.sh" shm 4 "$gpt" "${model[@]}" --backend "$backend" --precision bf16 \
    --data-parallel 2 --clip 0.05 --fsdp --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "$backend mpirun -np 4, --clip, std1f1b x fsdp 2: $line" ||
    bad "$backend mpirun -np 4, --clip, fsdp 2: $line (in-process data parallel: $ref)"
fi

# two replicas of a 2-stage pipeline, each on half the batch, against the
# same data-parallel run on the CPU: both must train, and their losses agree
dp=$("$gpt" "${model[@]}" --backend "$backend" --precision f32 --schedule std1f1b --stages 2 --data-parallel 2 2>&1 |
  tail -n 1)
dpc=$("$gpt" "${model[@]}" --schedule std1f1b --stages 2 --data-parallel 2 2>&1 | tail -n 1)
close() { # close LINE_A LINE_B REL: the final losses agree to REL
  python3 - "$1" "$2" "$3" <<'PY'
import sys
a, b, rel = sys.argv[1], sys.argv[2], float(sys.argv[3])
la = float(a.split()[0].split("=")[1]); lb = float(b.split()[0].split("=")[1])
sys.exit(0 if abs(la - lb) <= rel * abs(lb) else 1)
PY
}
close "$dp" "$dpc" 1e-3 && ok "$backend data-parallel 2: $dp (cpu: $dpc)" || bad "$backend data-parallel: $dp vs cpu $dpc"
# FSDP on this backend: the replicas' shards give data parallelism's bits
for precision in f32 bf16; do
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --schedule std1f1b --stages 2 \
    --data-parallel 2 2>&1 | tail -n 1)
  line=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --schedule std1f1b --stages 2 \
    --data-parallel 2 --fsdp 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "$backend $precision fsdp std1f1b x 2 replicas: $line" ||
    bad "$backend $precision fsdp: $line vs data parallel $ref"
done

# FSDP gathered once per step, with the gradients clipped to a global norm
# (each replica's part of the sum of squares, summed over the mesh): data
# parallelism's bits, and a pipeline's the loop's
for precision in f32 bf16; do
  ref=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --clip 0.05 --data-parallel 2 2>&1 |
    tail -n 1)
  for when in task step; do
    line=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --clip 0.05 --schedule std1f1b \
      --stages 2 --data-parallel 2 --fsdp --fsdp-gather $when 2>&1 | tail -n 1)
    [ "$line" = "$ref" ] && ok "$backend $precision --clip, fsdp gathered per $when, std1f1b x 2: $line" ||
      bad "$backend $precision --clip, fsdp per $when: $line vs data parallel $ref"
  done
done

# tensor parallelism on this backend: the model axis' collectives on its
# buffers; every pipeline gives the split loop's bits, and with FSDP (3
# axes) plain data parallelism's
for precision in f32 bf16; do
  tp=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --tensor-parallel 2 2>&1 | tail -n 1)
  case "$tp" in final_loss=*" params_sha256="*) ok "$backend $precision tensor parallel 2, loop: $tp" ;;
  *) bad "$backend $precision tensor parallel 2 printed: $tp" ;; esac
  for s in "std1f1b 2 2" "interleaved1f1b 4 2" "zerobubble 4 4"; do
    set -- $s
    line=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --tensor-parallel 2 --schedule "$1" \
      --stages "$2" --ranks "$3" 2>&1 | tail -n 1)
    [ "$line" = "$tp" ] && ok "$backend $precision tensor parallel 2, $1 S=$2 D=$3" ||
      bad "$backend $precision tensor parallel 2, $1 S=$2 D=$3: $line vs the split loop $tp"
  done
  tpdp=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --tensor-parallel 2 --data-parallel 2 \
    --clip 0.05 2>&1 | tail -n 1)
  line=$("$gpt" "${model[@]}" --backend "$backend" --precision $precision --tensor-parallel 2 --data-parallel 2 \
    --clip 0.05 --fsdp --schedule std1f1b --stages 2 2>&1 | tail -n 1)
  [ "$line" = "$tpdp" ] && ok "$backend $precision --clip, std1f1b x fsdp 2 x tensor parallel 2: $line" ||
    bad "$backend $precision 3 axes: $line vs $tpdp"
done
tpc=$("$gpt" "${model[@]}" --tensor-parallel 2 --precision f32 2>&1 | tail -n 1)
tpb=$("$gpt" "${model[@]}" --backend "$backend" --tensor-parallel 2 --precision f32 2>&1 | tail -n 1)
close "$tpb" "$tpc" 1e-3 && ok "$backend tensor parallel 2 vs cpu, f32: $tpb / $tpc" ||
  bad "$backend tensor parallel 2 vs cpu: $tpb / $tpc"

# 20 steps (f32), then 50 steps (bf16) of a slightly larger model: the
# loss tracks the CPU's, to f32 rounding, then to bf16's
big=(--layers 2 --width 64 --heads 4 --seq 32 --batch 8 --microbatches 2 --quiet)
lb=$("$gpt" "${big[@]}" --steps 20 --backend "$backend" --precision f32 | tail -n 1)
lc=$("$gpt" "${big[@]}" --steps 20 --precision f32 | tail -n 1)
close "$lb" "$lc" 1e-3 && ok "$backend vs cpu, f32, 20 steps: $lb / $lc" || bad "$backend vs cpu f32: $lb / $lc"
lb=$("$gpt" "${big[@]}" --steps 50 --backend "$backend" --precision bf16 | tail -n 1)
lc=$("$gpt" "${big[@]}" --steps 50 --precision bf16 | tail -n 1)
close "$lb" "$lc" 2e-2 && ok "$backend vs cpu, bf16, 50 steps: $lb / $lc" || bad "$backend vs cpu bf16: $lb / $lc"

out=$("$gpt" "${model[@]}" --backend "$backend" --schedule std1f1b --stages 2 --data /nonexistent 2>&1); rc=$?
[ "$rc" -eq 1 ] && grep -q "cannot open" <<<"$out" && ok "exit 1: cannot open" || bad "bad data file: $rc $out"
echo "examples_backend: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
