#!/usr/bin/env bash
# FSDP under mpirun over 3 replicas, with parameters 3 does not divide: each
# is sharded into 3 padded shards of ceil(numel / 3) elements, the last one
# shorter, so the gradients' reduce-scatter (an all-to-all whose counts
# differ per replica) and the parameters' gathers move unequal parts. The
# GPT's final line (loss and parameter hash after 3 steps) must be the bits
# of plain data parallelism over 3 in-process replicas: the loop on 3
# processes and a 2-stage pipeline on 6, in f32 and in bf16.
#   fsdp_mpi.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
gpt="$build/examples/gpt"
mpirun_sh="$src/tests/mpirun.sh"
# width 32: layer norms and biases of 32 elements, wpe 16 x 32, wte 256 x 32
# (tied: its gradient is the sum of two ranks' shards on the pipeline)
model=(--layers 2 --width 32 --heads 2 --seq 16 --batch 12 --microbatches 4 --steps 3 --tie-embeddings)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the parameters' shapes, from the header of the weights file a plain run
# writes: at least one must not be a multiple of 3 elements
"$gpt" "${model[@]}" --quiet --data-parallel 3 --export-weights "$tmp/w.safetensors" >/dev/null 2>&1
len=$(od -An -tu8 -N8 "$tmp/w.safetensors" 2>/dev/null | tr -d ' ')
shapes=$(tail -c +9 "$tmp/w.safetensors" | head -c "${len:-0}" | grep -o '"[^"]*":{"dtype":"[A-Z0-9]*","shape":\[[0-9,]*\]')
nparams=0 uneven=""
while IFS= read -r s; do
  [ -n "$s" ] || continue
  name=${s%%\":*} name=${name#\"} dims=${s##*\[} dims=${dims%\]}
  numel=$((${dims//,/*}))
  nparams=$((nparams + 1))
  [ $((numel % 3)) -ne 0 ] && uneven="$uneven $name($numel)"
done <<<"$shapes"
[ "$nparams" -gt 0 ] && [ -n "$uneven" ] &&
  ok "$nparams parameters, of them not a multiple of 3 elements:$uneven" ||
  bad "the model's parameters ($nparams read from $tmp/w.safetensors): none has a size 3 does not divide"

for precision in f32 bf16; do
  p=(--precision $precision)
  # how many parameters FSDP shards (the plan is the same in-process and
  # under MPI; the in-process pipelined run prints the count): every one, in
  # bf16 too (each replica casts its shard and the replicas gather the bf16
  # copy)
  out=$("$gpt" "${model[@]}" "${p[@]}" --data-parallel 3 --fsdp --schedule std1f1b --stages 2 2>&1)
  sharded=$(sed -n 's/.*FSDP over 3 replicas (\([0-9]*\) parameters sharded.*/\1/p' <<<"$out")
  [ "$sharded" = "$nparams" ] && ok "$precision, in-process fsdp x 3: all $nparams parameters sharded" ||
    bad "$precision, in-process fsdp x 3: ${sharded:-no count} of $nparams parameters sharded: $(grep 'FSDP over' <<<"$out")"
  ref=$("$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 3 | tail -n 1)
  case "$ref" in
    final_loss=*" params_sha256="*) ok "$precision, in-process loop x 3 replicas (plain): $ref" ;;
    *) bad "$precision, in-process loop x 3 replicas printed: $ref"; continue ;;
  esac
  line=$("$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 3 --fsdp | tail -n 1)
  [ "$line" = "$ref" ] && ok "$precision, in-process fsdp loop x 3" || bad "$precision, in-process fsdp loop x 3: $line vs $ref"
  line=$("$mpirun_sh" shm 3 "$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 3 --fsdp --runtime mpi 2>&1 |
    tail -n 1)
  [ "$line" = "$ref" ] && ok "$precision, mpirun -np 3, fsdp loop x 3 replicas: the in-process bits" ||
    bad "$precision, mpirun -np 3, fsdp loop x 3 replicas: $line vs plain data parallel $ref"
  out=$("$mpirun_sh" shm 6 "$gpt" "${model[@]}" "${p[@]}" --data-parallel 3 --fsdp --schedule std1f1b --stages 2 \
    --runtime mpi 2>&1)
  line=$(tail -n 1 <<<"$out")
  grep -q "on MPI processes, FSDP replicas" <<<"$out" && [ "$line" = "$ref" ] &&
    ok "$precision, mpirun -np 6, fsdp std1f1b S=2 x 3 replicas: the in-process bits" ||
    bad "$precision, mpirun -np 6, fsdp std1f1b S=2 x 3 replicas: $out
    (want the last line $ref)"
done
echo "fsdp_mpi: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
