#!/usr/bin/env bash
# The gpt program on GPT-2 weights in Hugging Face's layout (--init-from)
# and llm.c token files (--tokens), from files the gpt_files tool writes:
# - from imported weights, 2 steps pipelined (std1f1b, zerobubble on 2
#   stages; std1f1b under mpirun when this build has MPI) end on the
#   one-rank loop's final line, which differs from a run from random
#   weights; the "transformer." prefix reads the same values;
# - split over 2 model ranks (--tensor-parallel 2) the import gives each
#   rank its part: the first loss is the whole model's to float tolerance,
#   and pipelines (and mpirun) end on the split loop's final line;
# - a token file on GPT-2's vocabulary (50257 by default with --tokens)
#   trains, pipelined equal to the loop;
# - bad files and conflicting options end with a message naming the file or
#   the tensor and what is wrong, exit 1 (a bad file) or 2 (bad options).
#   gpt_files.sh GPT GPT_FILES SOURCE_DIR
set -uo pipefail
gpt=$1 files=$2 src=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
final() { "$gpt" "$@" 2>&1 | tail -n 1; }

"$files" hf "$tmp/gpt2.safetensors" || exit 1                          # 2 layers, width 16, vocab 64, 32 positions
"$files" hf "$tmp/prefixed.safetensors" --prefix transformer. || exit 1 # the same values under transformer.
"$files" hf "$tmp/bf16.safetensors" --prefix transformer. --dtype BF16 || exit 1
"$files" tokens "$tmp/tok64.bin" --n 4096 --vocab 64 || exit 1
"$files" tokens "$tmp/tok50k.bin" --n 2000 --vocab 50257 || exit 1
loud=(--heads 2 --seq 16 --batch 8 --microbatches 4 --steps 2)
model=("${loud[@]}" --quiet)

ref=$(final --init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}")
case "$ref" in final_loss=*" params_sha256="*) ok "imported, loop: $ref" ;; *) bad "imported, loop printed: $ref" ;; esac
for sched in std1f1b zerobubble; do
  line=$(final --init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}" --schedule $sched --stages 2)
  [ "$line" = "$ref" ] && ok "imported, $sched on 2 stages: the loop's final line" || bad "imported, $sched: $line vs $ref"
done
probe=$("$gpt" --init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}" --schedule std1f1b \
  --stages 2 --runtime mpi 2>&1)
if ! [ -x "$(command -v mpirun)" ] || grep -q "no MPI" <<<"$probe"; then
  echo "skipped: the mpirun case (this build has no MPI runtime, or there is no mpirun)"
else
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" --init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" \
    "${model[@]}" --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "imported, mpirun -np 2: the loop's final line" || bad "imported, mpirun -np 2: $line vs $ref"
fi
# split over 2 model ranks: the file's whole tensors are checked against
# the parameters' whole shapes and each model rank gets its part; the first
# step's loss is the whole model's to float tolerance (the split sums add
# in another order), it trains, and a pipeline (and mpirun) ends on the
# split loop's final line bit for bit
close() { # close LINE_A LINE_B REL: the final losses agree to REL
  awk -v a="${1#final_loss=}" -v b="${2#final_loss=}" -v r="$3" \
    'BEGIN { split(a, x, " "); split(b, y, " "); d = x[1] - y[1]; if (d < 0) d = -d; exit !(d <= r * y[1]) }'
}
imp=(--init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}")
one=$(final "${imp[@]}" --steps 1)
tp1=$(final "${imp[@]}" --steps 1 --tensor-parallel 2)
tp=$(final "${imp[@]}" --tensor-parallel 2)
case "$tp1" in
  final_loss=*) close "$tp1" "$one" 1e-5 && [ "$tp1" != "$one" ] && ok "imported, tensor parallel 2: first loss $tp1 (whole: $one)" ||
    bad "imported, tensor parallel 2: first loss $tp1 vs the whole model's $one" ;;
  *) bad "imported, tensor parallel 2 printed: $tp1" ;;
esac
case "$tp" in
  final_loss=*) [ "${tp%% *}" != "${tp1%% *}" ] && close "$tp" "$ref" 1e-4 && ok "imported, tensor parallel 2 trains: $tp" ||
    bad "imported, tensor parallel 2, 2 steps: $tp (1 step: $tp1, whole: $ref)" ;;
  *) bad "imported, tensor parallel 2, 2 steps printed: $tp" ;;
esac
for sched in std1f1b zerobubble; do
  line=$(final "${imp[@]}" --tensor-parallel 2 --schedule $sched --stages 2)
  [ "$line" = "$tp" ] && [ "${tp#final_loss=}" != "$tp" ] &&
    ok "imported, tensor parallel 2, $sched on 2 stages: the split loop's final line" ||
    bad "imported, tensor parallel 2, $sched: $line vs $tp"
done
if [ -x "$(command -v mpirun)" ] && ! grep -q "no MPI" <<<"$probe"; then
  line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${imp[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 --runtime mpi 2>&1 |
    tail -n 1)
  [ "$line" = "$tp" ] && [ "${tp#final_loss=}" != "$tp" ] &&
    ok "imported, tensor parallel 2, mpirun -np 4: the split loop's final line" ||
    bad "imported, tensor parallel 2, mpirun -np 4: $line vs $tp"
fi
random=$(final --tokens "$tmp/tok64.bin" --vocab 64 --layers 2 --width 16 --tie-embeddings "${model[@]}")
case "$random" in
  final_loss=*) [ "$random" != "$ref" ] && ok "random weights end elsewhere: $random" || bad "the import changed nothing: $random" ;;
  *) bad "random weights printed: $random" ;;
esac
line=$(final --init-from "$tmp/prefixed.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}")
[ "$line" = "$ref" ] && ok "\"transformer.\" names: the same run" || bad "\"transformer.\" names: $line vs $ref"
line=$(final --init-from "$tmp/bf16.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}" --schedule std1f1b --stages 2)
line1=$(final --init-from "$tmp/bf16.safetensors" --tokens "$tmp/tok64.bin" "${model[@]}")
case "$line" in final_loss=*) [ "$line" = "$line1" ] && ok "a BF16 file: $line" || bad "BF16: $line vs $line1" ;; *) bad "BF16 file: $line" ;; esac
out=$("$gpt" --init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin" --heads 2 --steps 1 --batch 4 2>&1)
grep -q "gpt: 2 layers, width 16, 2 heads, seq 32, .* (tied embeddings)" <<<"$out" &&
  grep -q "weights from $tmp/gpt2.safetensors" <<<"$out" && ok "the model is the file's; seq cut to its 32 positions" ||
  bad "the model of --init-from: $out"

# generation from imported weights: token ids in and out, pipelined = loop
gen=(--init-from "$tmp/gpt2.safetensors" --heads 2 --seq 16 --batch 4 --microbatches 2 --generate 6 --prompt 1,2,3
  --temperature 0.8 --top-k 5 --quiet)
g1=$("$gpt" "${gen[@]}" 2>&1)
g2=$("$gpt" "${gen[@]}" --schedule std1f1b --stages 2 2>&1)
grep -q "^sample 3: 1,2,3,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*$" <<<"$g1" && [ "$g1" = "$g2" ] &&
  ok "--init-from --generate: $(tail -n 1 <<<"$g1"), the same on 2 stages" || bad "--init-from --generate: $g1 vs $g2"

# GPT-2's vocabulary by default with --tokens
out=$("$gpt" --tokens "$tmp/tok50k.bin" --layers 2 --width 16 "${loud[@]}" 2>&1)
grep -q "data: $tmp/tok50k.bin, 2000 tokens; the loss starts near ln(50257)" <<<"$out" &&
  ok "--tokens: vocabulary 50257" || bad "--tokens, vocabulary: $out"
ref=$(tail -n 1 <<<"$out")
line=$(final --tokens "$tmp/tok50k.bin" --layers 2 --width 16 "${model[@]}" --schedule std1f1b --stages 2)
case "$ref" in final_loss=*) [ "$line" = "$ref" ] && ok "--tokens, std1f1b = loop: $line" || bad "--tokens std1f1b: $line vs $ref" ;;
  *) bad "--tokens printed: $ref" ;; esac

expect() { # expect STATUS PATTERN ARGS...
  local want=$1 pat=$2; shift 2
  out=$("$gpt" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then ok "exit $rc: $pat"; else bad "gpt $*: exit $rc, output: $out"; fi
}
"$files" tokens "$tmp/magic.bin" --n 100 --vocab 64 --magic 20240326
"$files" tokens "$tmp/version.bin" --n 100 --vocab 64 --version 2
"$files" tokens "$tmp/count.bin" --n 100 --vocab 64 --count 5000
"$files" tokens "$tmp/big.bin" --n 100 --vocab 64 --bad-at 42
"$files" tokens "$tmp/short.bin" --n 10 --vocab 64
head -c 100 "$tmp/tok64.bin" >"$tmp/head.bin"
tok=(--vocab 64 "${model[@]}")
expect 1 "token file $tmp/magic.bin: magic number 20240326 where llm.c's token files have 20240520" --tokens "$tmp/magic.bin" "${tok[@]}"
expect 1 "token file $tmp/version.bin: version 2; only version 1" --tokens "$tmp/version.bin" "${tok[@]}"
expect 1 "token file $tmp/count.bin: the header counts 5000 tokens (10000 bytes after the header) but the file has 200" \
  --tokens "$tmp/count.bin" "${tok[@]}"
expect 1 "token file $tmp/big.bin: token 64 at position 42 is not an id of the model's vocabulary of 64" \
  --tokens "$tmp/big.bin" "${tok[@]}"
expect 1 "token 64 at position 42" --tokens "$tmp/big.bin" --init-from "$tmp/gpt2.safetensors" "${model[@]}"
expect 1 "token file $tmp/short.bin holds 10 tokens; at least 17 are needed" --tokens "$tmp/short.bin" "${tok[@]}"
expect 1 "token file $tmp/head.bin: 100 bytes, too short for the 1024-byte header" --tokens "$tmp/head.bin" "${tok[@]}"
expect 1 "cannot open token file $tmp/none.bin" --tokens "$tmp/none.bin" "${tok[@]}"
expect 2 "--data (the bytes of a text), --tokens (a token file) and --text (a text through --tokenizer) are sources of data" \
  --data "$tmp/tok64.bin" --tokens "$tmp/tok64.bin"
expect 2 "--init-from starts from GPT-2's weights and --resume from a checkpoint" \
  --init-from "$tmp/gpt2.safetensors" --resume "$tmp/gpt2.safetensors"
hf=(--init-from "$tmp/gpt2.safetensors" --tokens "$tmp/tok64.bin")
expect 2 "tensor wte.weight is [64, 16]; vocab 64 and width 32 need [64, 32]" "${hf[@]}" "${model[@]}" --width 32
expect 2 "tensor wte.weight is [64, 16]; vocab 50257 and width 16 need [50257, 16]" "${hf[@]}" "${model[@]}" --vocab 50257
expect 2 "tensor wpe.weight is [32, 16]; seq 64 needs at least [64, 16]" "${hf[@]}" --heads 2 --seq 64
expect 2 "tensor h.2.ln_1.weight is missing" "${hf[@]}" "${model[@]}" --layers 3
expect 2 "the number of heads cannot be inferred" "${hf[@]}" --seq 16
expect 1 "data file $tmp/tok64.bin: byte" --init-from "$tmp/gpt2.safetensors" --data "$tmp/tok64.bin" "${model[@]}" \
  --bytes-as-tokens
expect 1 "the generated corpus: byte" --init-from "$tmp/gpt2.safetensors" "${model[@]}" --bytes-as-tokens
expect 1 "cannot open $tmp/none.safetensors" --init-from "$tmp/none.safetensors" "${model[@]}"
expect 1 "$tmp/tok64.bin: " --init-from "$tmp/tok64.bin" "${model[@]}"
echo "gpt_files: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
