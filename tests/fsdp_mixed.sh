#!/usr/bin/env bash
# FSDP in mixed precision with the gradients clipped (gpt --clip): every
# parameter is sharded (each replica casts its shard and the replicas gather
# the 16-bit copy), and the final line (loss and parameter hash after 3
# steps) is plain data parallelism's, bit for bit, in bf16 and f16, gathered
# per task and per step, on the loop and every schedule of the equivalence
# list, in-process and under mpirun -np 4; the LLaMA example too.
#   fsdp_mixed.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
gpt="$build/examples/gpt" llama="$build/examples/llama"
model=(--layers 4 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 3 --tie-embeddings --clip 0.05)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
schedules=$(cat "$src/tests/equivalence_schedules.txt")
probe=$("$gpt" "${model[@]}" --quiet --schedule std1f1b --stages 2 --runtime mpi 2>&1)
mpi=1
if ! [ -x "$(command -v mpirun)" ] || grep -q "no MPI" <<<"$probe"; then
  echo "skipped: the mpirun cases (this build has no MPI runtime, or there is no mpirun)"
  mpi=0
fi

for precision in bf16 f16; do
  p=(--precision $precision)
  dp=$("$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 2 | tail -n 1)
  case "$dp" in final_loss=*" params_sha256="*) ok "$precision --clip, data parallel 2: $dp" ;;
  *) bad "$precision data parallel 2 printed: $dp"; continue ;; esac
  # every parameter sharded: the summary names none left whole
  out=$("$gpt" "${model[@]}" "${p[@]}" --data-parallel 2 --fsdp --schedule std1f1b --stages 2 2>&1)
  sharded=$(sed -n 's/.*FSDP over 2 replicas (\([0-9]*\) parameters sharded.*/\1/p' <<<"$out")
  [ -n "$sharded" ] && [ "$sharded" -gt 0 ] && ! grep -q "FSDP left" <<<"$out" &&
    ok "$precision --clip: all $sharded parameters sharded" ||
    bad "$precision --clip: not every parameter sharded: $(grep -A3 'FSDP' <<<"$out")"
  for when in task step; do
    line=$("$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 2 --fsdp --fsdp-gather $when | tail -n 1)
    [ "$line" = "$dp" ] && ok "$precision fsdp per $when, loop x 2" || bad "$precision fsdp per $when, loop: $line vs $dp"
    while read -r name stages ranks extra; do
      line=$("$gpt" "${model[@]}" "${p[@]}" --quiet --schedule "$name" --stages "$stages" --ranks "$ranks" $extra \
        --data-parallel 2 --fsdp --fsdp-gather $when 2>&1 | tail -n 1)
      [ "$line" = "$dp" ] && ok "$precision fsdp per $when, $name S=$stages D=$ranks x 2" ||
        bad "$precision fsdp per $when, $name S=$stages D=$ranks $extra x 2: $line vs data parallel $dp"
    done <<<"$schedules"
    [ $mpi -eq 1 ] || continue
    # under mpirun: the loop on 2 processes, and every schedule of the list
    # that runs on 2 ranks on 4 (f16: gathered per task only); mpirun reads
    # standard input, so it gets none (the list is the loop's)
    [ "$precision" = f16 ] && [ "$when" = step ] && continue
    line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" "${p[@]}" --quiet --data-parallel 2 --fsdp \
      --fsdp-gather $when --runtime mpi 2>&1 | tail -n 1)
    [ "$line" = "$dp" ] && ok "$precision mpirun -np 2, fsdp per $when, loop x 2: the in-process bits" ||
      bad "$precision mpirun -np 2, fsdp per $when, loop: $line vs $dp"
    while read -r name stages ranks extra; do
      [ "$ranks" = 2 ] || continue
      line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${model[@]}" "${p[@]}" --quiet --schedule "$name" --stages "$stages" \
        --ranks 2 $extra --data-parallel 2 --fsdp --fsdp-gather $when --runtime mpi 2>&1 </dev/null | tail -n 1)
      [ "$line" = "$dp" ] && ok "$precision mpirun -np 4, fsdp per $when, $name S=$stages x 2: the in-process bits" ||
        bad "$precision mpirun -np 4, fsdp per $when, $name S=$stages: $line vs $dp"
    done <<<"$schedules"
  done
done

# --auto with --fsdp weighs when to gather: both policies are candidates
# (the report's gather column), the chosen layout fits the limit, and it
# trains to the bits of that layout given by hand (with plain data
# parallelism's numbers)
am=(--layers 4 --width 32 --heads 2 --seq 16 --batch 8 --steps 3 --tie-embeddings --precision bf16 --data-parallel 2)
out=$("$gpt" "${am[@]}" --auto --ranks 2 --fsdp --memory-limit 700K 2>&1)
chosen=$(sed -n 's/^auto: training \([a-z0-9]*\), \([0-9]*\) stages, \([0-9]*\) microbatches, remat \([a-z]*\), fsdp gathered per \([a-z]*\)$/\1 \2 \3 \4 \5/p' <<<"$out")
if [ -n "$chosen" ] && grep -q "  gather  " <<<"$out" && grep -q " task  " <<<"$out" && grep -q " step  " <<<"$out"; then
  set -- $chosen
  line=$("$gpt" "${am[@]}" --quiet --schedule "$1" --stages "$2" --balance-stages --ranks 2 --microbatches "$3" \
    --remat "$4" --fsdp --fsdp-gather "$5" | tail -n 1)
  plain=$("$gpt" "${am[@]}" --quiet --schedule "$1" --stages "$2" --balance-stages --ranks 2 --microbatches "$3" \
    --remat "$4" | tail -n 1)
  [ "$(tail -n 1 <<<"$out")" = "$line" ] && [ "$line" = "$plain" ] &&
    ok "--auto --fsdp: chose $chosen (gathers weighed), the bits of that layout and of plain data parallelism" ||
    bad "--auto --fsdp: $(tail -n 1 <<<"$out") vs the layout by hand $line, plain $plain"
else
  bad "--auto --fsdp: no gather policy weighed or chosen: $out"
fi

# LLaMA blocks (RMS norms, grouped-query attention, SwiGLU) in bf16
lm=(--layers 4 --width 32 --heads 4 --kv-heads 2 --seq 16 --batch 8 --microbatches 4 --steps 3 --clip 0.05 --quiet
  --precision bf16)
ldp=$("$llama" "${lm[@]}" --data-parallel 2 | tail -n 1)
for s in "" "--schedule zerobubble --stages 4 --ranks 4" "--schedule dualpipev --stages 4 --ranks 2"; do
  for when in task step; do
    line=$("$llama" "${lm[@]}" $s --data-parallel 2 --fsdp --fsdp-gather $when 2>&1 | tail -n 1)
    [ "$line" = "$ldp" ] && ok "llama bf16 --clip, fsdp per $when, ${s:-loop} x 2" ||
      bad "llama fsdp per $when, ${s:-loop}: $line vs $ldp"
  done
done
echo "fsdp_mixed: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
