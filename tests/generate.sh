#!/usr/bin/env bash
# Greedy generation is the model's own argmax, on every layout. For gpt and
# for llama (4 query heads sharing 2 key/value heads), each trained for a
# few steps (--vocab 260, so that prompts and samples are token ids):
# - `--generate N --temperature 0` on the one-rank loop and on every
#   schedule of tests/equivalence_schedules.txt (f32; 8 sequences in 4
#   microbatches, two prompts of different lengths): every token generated
#   is the argmax of the forward pass's logits over the generated sequence
#   (generate_check: the training graph's forward, no cache), and every
#   schedule prints the loop's samples;
# - split over 2 model ranks (--tensor-parallel 2): the argmax again, and
#   pipelined the split loop's samples;
# - under mpirun (std1f1b on 2 processes): the loop's samples;
# - --eos ends each sequence after it draws that id; one sequence (--batch 1)
#   prints its tokens as they come, the same line.
#   generate.sh BUILD_DIR SOURCE_DIR GENERATE_CHECK
set -uo pipefail
build=$1 src=$2 check=$3
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
schedules=$(cat "$src/tests/equivalence_schedules.txt")
probe=$("$build/examples/gpt" --layers 2 --width 16 --heads 2 --seq 8 --steps 1 --schedule std1f1b --stages 2 \
  --runtime mpi 2>&1)
has_mpi=0
[ -x "$(command -v mpirun)" ] && ! grep -q "no MPI" <<<"$probe" && has_mpi=1

for arch in gpt llama; do
  prog="$build/examples/$arch"
  shape=(--layers 4 --width 32 --heads 4 --seq 24 --vocab 260 --tie-embeddings)
  [ $arch = llama ] && shape+=(--kv-heads 2)
  "$prog" "${shape[@]}" --batch 8 --microbatches 4 --steps 150 --lr 0.01 --quiet --save "$tmp/$arch.st" >/dev/null ||
    { bad "$arch: training the checkpoint failed"; continue; }
  gen=("${shape[@]}" --resume "$tmp/$arch.st" --generate 14 --temperature 0 --batch 8 --microbatches 4 --quiet
    --prompt 84,104,101,32 --prompt 65,32,99,97,116)
  checker=("$check" --arch $arch --resume "$tmp/$arch.st" --prompt-len 4,5 "${shape[@]}")
  ref=$("$prog" "${gen[@]}" 2>&1)
  if [ "$(grep -c '^sample ' <<<"$ref")" -eq 8 ] && out=$("${checker[@]}" <<<"$ref"); then
    ok "$arch greedy, loop: $out ($(head -n 1 <<<"$ref"))"
  else
    bad "$arch greedy, loop: $ref / $out"
  fi
  while read -r name stages ranks extra; do
    line=$("$prog" "${gen[@]}" --schedule "$name" --stages "$stages" --ranks "$ranks" $extra 2>&1)
    if out=$("${checker[@]}" <<<"$line") && [ "$line" = "$ref" ]; then
      ok "$arch greedy, $name S=$stages D=$ranks $extra: the forward's argmax, the loop's samples"
    else
      bad "$arch greedy, $name S=$stages D=$ranks $extra: $out / $line vs $ref"
    fi
  done <<<"$schedules"
  tp=$("$prog" "${gen[@]}" --tensor-parallel 2 2>&1)
  tpp=$("$prog" "${gen[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 2>&1)
  if out=$("${checker[@]}" <<<"$tp") && [ "$tpp" = "$tp" ]; then
    ok "$arch greedy, tensor parallel 2: the forward's argmax; std1f1b on 2 stages the split loop's samples"
  else
    bad "$arch greedy, tensor parallel 2: $out / $tp / std1f1b $tpp"
  fi
  if [ $has_mpi = 1 ]; then
    line=$("$src/tests/mpirun.sh" shm 2 "$prog" "${gen[@]}" --schedule std1f1b --stages 2 --runtime mpi 2>&1)
    [ "$line" = "$ref" ] && ok "$arch: mpirun -np 2 std1f1b, the loop's samples" || bad "$arch mpirun: $line vs $ref"
  fi
  # --eos: each sequence ends once it draws the id (the first token sequence 0 drew)
  eos=$(sed -n 's/^sample 0: \([0-9,]*\)$/\1/p' <<<"$ref" | cut -d, -f5)
  line=$("$prog" "${gen[@]}" --eos "$eos" 2>&1)
  good=1
  while read -r a && read -r b <&3; do # each line: the reference's, cut after its first eos past the prompt
    want=$(awk -F'[:,]' -v eos="$eos" -v p="$( [[ ${a%%:*} =~ [13579]$ ]] && echo 5 || echo 4 )" '{
      printf "%s:", $1; for (i = 2; i <= NF; i++) { printf "%s%s", (i > 2 ? "," : ""), $i; if (i - 1 > p && $i + 0 == eos) break } }' <<<"$a")
    [ "$want" = "$b" ] || { good=0; echo "  eos $eos: $b, expected $want"; }
  done <<<"$ref" 3<<<"$line"
  [ $good = 1 ] && ok "$arch --eos $eos: each sequence cut after its first $eos" || bad "$arch --eos $eos: $line"
  # one sequence: its tokens stream, the line as the loop prints it
  one=$("$prog" "${gen[@]}" --batch 1 --microbatches 1 2>&1)
  [ "$one" = "$(head -n 1 <<<"$ref")" ] && ok "$arch --batch 1: $one" || bad "$arch --batch 1: $one vs $(head -n 1 <<<"$ref")"
  out=$("$prog" "${gen[@]}" --eos 260 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q "eos 260 is not a token of the vocabulary (ids 0 .. 259)" <<<"$out" &&
    ok "$arch --eos 260 of a vocabulary of 260: exit 2, named" || bad "$arch --eos 260: exit $rc: $out"
done
echo "generate: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
