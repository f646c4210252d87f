#!/usr/bin/env bash
# gpt, llama and the mpmd tool against a user who gets things wrong, or a
# full disk: each section below says what it checks.
#   cli_misuse.sh GPT LLAMA MPMD GPT_FILES
set -uo pipefail
abs() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
gpt=$(abs "$1") llama=$(abs "$2") mpmd=$(abs "$3") files=$(abs "$4")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
model=(--layers 2 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 2 --tie-embeddings --quiet)
pipe=(--schedule gpipe --stages 2)
# run PROGRAM ARGS...: $out gets stdout and stderr, $rc the exit status
run() { out=$("$@" 2>&1); rc=$?; }
# refused STATUS PATTERN PROGRAM ARGS...: exits STATUS saying PATTERN
refused() {
  local want=$1 pat=$2; shift 2
  run "$@"
  if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then ok "exit $rc: $pat"; else bad "${*##*/}: exit $rc: $out"; fi
}
tmps() { find "$tmp" -name '*.tmp.*' | wc -l; }

# ---- outputs against outputs and inputs ----
# gpt's --save, --export-weights, --trace and --timeline against each other
# and against --data, --tokens, --init-from, --resume and a file: schedule,
# compared as files (./x and x, symbolic and hard links are one file):
# refused with exit 2 before the first step, naming both options and the
# path; --save onto the --resume checkpoint is allowed (saves are atomic);
# llama the same; mpmd -o against its file: schedule
head -c 20000 /dev/urandom | base64 >data.txt
cp data.txt data.orig
ln -s data.txt data.link
ln data.txt data.hard
refused 2 "--save data.txt is the file of --data data.txt" "$gpt" "${model[@]}" --data data.txt --save data.txt
refused 2 "--save ./data.txt is the file of --data data.txt" "$gpt" "${model[@]}" --data data.txt --save ./data.txt
refused 2 "--save data.link is the file of --data $tmp/data.txt" "$gpt" "${model[@]}" --data "$tmp/data.txt" --save data.link
refused 2 "--export-weights data.hard is the file of --data data.txt" "$gpt" "${model[@]}" --data data.txt \
  --export-weights data.hard
refused 2 "--trace data.txt is the file of --data data.txt" "$gpt" "${model[@]}" "${pipe[@]}" --data data.txt --trace data.txt
refused 2 "--save data.txt is the file of --data data.txt" "$llama" "${model[@]}" --data data.txt --save data.txt
cmp -s data.txt data.orig && ok "the training data is untouched" || bad "the training data changed"
refused 2 "--save ck.st and --export-weights ck.st are the same file" "$gpt" "${model[@]}" --save ck.st --export-weights ck.st
refused 2 "--save ck.st and --trace ./ck.st are the same file" "$gpt" "${model[@]}" "${pipe[@]}" --save ck.st --trace ./ck.st
refused 2 "--save ck.st and --timeline $tmp/ck.st are the same file" "$gpt" "${model[@]}" "${pipe[@]}" --save ck.st \
  --timeline "$tmp/ck.st"
refused 2 "--trace t.out and --timeline t.out are the same file" "$gpt" "${model[@]}" "${pipe[@]}" --trace t.out --timeline t.out
[ ! -e ck.st ] && [ ! -e t.out ] && ok "nothing written by a refused run" || bad "a refused run wrote a file"
"$files" tokens tok.bin --n 4096 --vocab 256 || exit 1
cp tok.bin tok.orig
refused 2 "--save tok.bin is the file of --tokens tok.bin" "$gpt" "${model[@]}" --vocab 256 --tokens tok.bin --save tok.bin
cmp -s tok.bin tok.orig && ok "the token file is untouched" || bad "the token file changed"
"$files" hf gpt2.safetensors --vocab 300 || exit 1
cp gpt2.safetensors gpt2.orig
refused 2 "--export-weights gpt2.safetensors is the file of --init-from gpt2.safetensors" \
  "$gpt" --init-from gpt2.safetensors --tokens tok.bin --heads 2 --seq 16 --steps 1 --export-weights gpt2.safetensors
cmp -s gpt2.safetensors gpt2.orig && ok "the --init-from weights are untouched" || bad "the --init-from weights changed"
"$mpmd" schedule gpipe --stages 2 --microbatches 4 >sched.txt
cp sched.txt sched.orig
refused 2 "--trace sched.txt is the file of --schedule file:sched.txt" "$gpt" "${model[@]}" --schedule file:sched.txt \
  --trace sched.txt
refused 2 "-o ./sched.txt is the schedule file of file:sched.txt" "$mpmd" schedule file:sched.txt -o ./sched.txt
cmp -s sched.txt sched.orig && ok "the schedule file is untouched" || bad "the schedule file changed"
# --save onto the checkpoint it resumes from: continues the run in its file
"$gpt" "${model[@]}" --save run.st >/dev/null || bad "saving run.st failed"
run "$gpt" "${model[@]}" --steps 4 --resume run.st --save run.st
four=$("$gpt" "${model[@]}" --steps 4 | tail -n 1)
[ "$rc" -eq 0 ] && [ "$(tail -n 1 <<<"$out")" = "$four" ] && run "$gpt" "${model[@]}" --steps 5 --resume run.st &&
  [ "$rc" -eq 0 ] && ok "--resume run.st --save run.st: 2 + 2 steps = 4 straight, and the file resumes again" ||
  bad "--resume run.st --save run.st: exit $rc: $out (straight: $four)"
refused 2 "--export-weights run.st is the file of --resume run.st" "$gpt" "${model[@]}" --steps 6 --resume run.st \
  --export-weights run.st

# ---- outputs written whole or not at all ----
# --trace, --timeline and mpmd -o: a write that fails half way exits 1 with
# a message and leaves the old file and no temporary file; a device is
# written in place
# a write that fails half way: the file-size limit (in 1 KiB blocks) makes
# write() fail as a full disk does, SIGXFSZ ignored
limited() { (trap '' XFSZ; ulimit -f "$1"; shift; "$@"); }
"$gpt" "${model[@]}" "${pipe[@]}" --trace trace.json --timeline timeline.svg >/dev/null || bad "writing a trace failed"
cp trace.json trace.orig
cp timeline.svg timeline.orig
[ "$(stat -c %s trace.json)" -gt 4096 ] && [ "$(stat -c %s timeline.svg)" -gt 4096 ] || bad "trace and timeline under 4 KiB"
out=$(limited 4 "$gpt" "${model[@]}" "${pipe[@]}" --trace trace.json 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot write trace.json: writing the temporary file" <<<"$out" && cmp -s trace.json trace.orig &&
  [ "$(tmps)" -eq 0 ] && ok "--trace on a full disk: exit 1, the old trace intact, no temporary file" ||
  bad "--trace on a full disk: exit $rc: $out ($(tmps) temporary files)"
out=$(limited 4 "$gpt" "${model[@]}" "${pipe[@]}" --timeline timeline.svg 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot write timeline.svg: writing the temporary file" <<<"$out" &&
  cmp -s timeline.svg timeline.orig && [ "$(tmps)" -eq 0 ] &&
  ok "--timeline on a full disk: exit 1, the old timeline intact, no temporary file" ||
  bad "--timeline on a full disk: exit $rc: $out ($(tmps) temporary files)"
big=(schedule interleaved1f1b --stages 8 --ranks 4 --microbatches 32 --format svg)
"$mpmd" "${big[@]}" -o big.svg || bad "mpmd -o big.svg failed"
cp big.svg big.orig
out=$(limited 4 "$mpmd" "${big[@]}" --microbatches 64 -o big.svg 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "cannot write big.svg: writing the temporary file" <<<"$out" && cmp -s big.svg big.orig &&
  [ "$(tmps)" -eq 0 ] && ok "mpmd -o on a full disk: exit 1, the old file intact, no temporary file" ||
  bad "mpmd -o on a full disk: exit $rc: $out ($(tmps) temporary files)"
run "$mpmd" "${big[@]}" -o /dev/full
[ $rc -eq 1 ] && grep -q "cannot write /dev/full: writing: No space left on device" <<<"$out" && [ -c /dev/full ] &&
  ok "mpmd -o /dev/full: exit 1, written in place (a device is never renamed over)" || bad "mpmd -o /dev/full: exit $rc: $out"

# ---- a full stdout ----
# exits non-zero with a message, whatever the command
for cmd in "$gpt ${model[*]}" "$llama ${model[*]}" "$gpt --help" "$mpmd plan --ranks 2 --layers 4 --batch 8" \
  "$mpmd plan --ranks 2 --layers 4 --batch 8 --format json" "$mpmd schedule gpipe --stages 2 --microbatches 4" \
  "$mpmd simulate std1f1b --stages 2 --microbatches 4 --format json" "$mpmd --help"; do
  out=$($cmd 2>&1 >/dev/full); rc=$?
  [ $rc -ne 0 ] && grep -q "writing to stdout failed" <<<"$out" &&
    ok "${cmd##*/} > /dev/full: exit $rc, $out" || bad "${cmd##*/} > /dev/full: exit $rc: $out"
done

# ---- JSON without NaN ----
# a loss that diverged (--lr 1e6, kept going with --no-nan-check) is null in
# every JSON line (progress, eval, final), which python's json reads
if command -v python3 >/dev/null; then
  out=$("$gpt" --layers 2 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 3 --lr 1e6 --no-nan-check \
    --json --eval 3 --log-every 1 2>&1); rc=$?
  why=$(python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.stdin.read().splitlines()]
final = lines[-1]
assert final["final_loss"] is None and final["eval_loss"] is None, final
assert any(l.get("loss", 0) is None for l in lines[:-1]), lines
assert any("eval_loss" in l and l["eval_loss"] is None for l in lines[:-1]), lines
' <<<"$out" 2>&1)
  [ $rc -eq 0 ] && [ -z "$why" ] && ok "--json with a NaN loss: every line is JSON, the loss null" ||
    bad "--json with a NaN loss: exit $rc: $out: $why"
else
  echo "skipped: the JSON case (no python3)"
fi

# ---- prompt lengths ----
# the prompt and the generated tokens must fit in --seq positions: the
# messages count the prompt's tokens and the room left right (never a
# negative count)
"$gpt" "${model[@]}" --save gen.st >/dev/null || bad "saving gen.st failed"
gen=(--layers 2 --width 32 --heads 2 --seq 16 --tie-embeddings --resume gen.st --batch 2 --microbatches 1)
for case in "20:--generate 20: the model has 16 positions (--seq 16)"$'\t'"at most 15 can be generated" \
  "1048576:--generate 1048576: the model has 16 positions"$'\t'"at most 15 can be generated" \
  "15:--prompt has 4 tokens, but with --generate 15"$'\t'"leave room for between 1 and 1" \
  "4 --prompt 0123456789abcdefghijkl:--prompt has 22 tokens, but with --generate 4"$'\t'"between 1 and 12"; do
  args=${case%%:*} want=${case#*:}
  run "$gpt" "${gen[@]}" --generate $args
  [ $rc -eq 2 ] && grep -qF -- "${want%%$'\t'*}" <<<"$out" && grep -qF -- "${want#*$'\t'}" <<<"$out" &&
    ! grep -q -- ' -[0-9]' <<<"$out" && ok "--generate $args: exit 2, ${want%%$'\t'*}" || bad "--generate $args: exit $rc: $out"
done
run "$gpt" "${gen[@]}" --generate 12 --prompt "The "
[ $rc -eq 0 ] && grep -q "^sample 1: " <<<"$out" && ok "a prompt of 4 and 12 generated fill the 16 positions" ||
  bad "--generate 12 with a prompt of 4 at --seq 16: exit $rc: $out"

# ---- weights that hold infinities ----
# one step at --lr 1e5 moves every parameter by about 1e5, past f16's 65504:
# the f16 export warns with the count and the tensors, and generation from
# it stops at the first position whose logits are not finite, naming the
# sequence and the position (exit 1) instead of printing garbage
wide=(--layers 2 --width 32 --heads 2 --seq 16 --tie-embeddings)
run "$gpt" "${wide[@]}" --batch 8 --microbatches 4 --steps 1 --lr 1e5 --quiet --export-weights inf16.st --dtype f16
[ $rc -eq 0 ] && grep -q "warning: --export-weights inf16.st (f16): [0-9]* values too large for f16 were written as infinities, in [0-9]* tensors: block_0/" <<<"$out" &&
  ok "an f16 export that overflows warns: $(grep -o 'warning: [^:]*: [0-9]* values[^,]*' <<<"$out")" ||
  bad "an f16 export of values past 65504: exit $rc: $out"
run "$gpt" "${wide[@]}" --resume inf16.st --generate 4 --batch 2 --microbatches 1
[ $rc -eq 1 ] && grep -q "sequence 0, position 0: 256 of the 256 logits are NaN or infinite" <<<"$out" &&
  ! grep -q "^sample" <<<"$out" && ok "generation from infinite weights: exit 1, $(grep -o 'sequence 0, position 0' <<<"$out")" ||
  bad "generation from infinite weights: exit $rc: $out"
run "$gpt" "${wide[@]}" --batch 8 --microbatches 4 --steps 1 --lr 1e5 --quiet --export-weights bf.st --dtype bf16
[ $rc -eq 0 ] && ! grep -q warning <<<"$out" && ok "the same weights in bf16: no warning" || bad "bf16 export: exit $rc: $out"

# ---- GPT-2's weights on bytes ----
# --init-from's weights read ids as GPT-2's BPE tokens: byte data (--data,
# or the generated corpus) is refused before anything runs, saying what to
# give instead; --bytes-as-tokens asks for it and trains
head -c 4000 data.orig >bytes.txt
"$files" hf hf300.safetensors --vocab 300 || exit 1
hf=(--init-from hf300.safetensors --heads 2 --seq 16 --batch 4 --microbatches 2 --steps 1 --quiet)
refused 2 "--init-from hf300.safetensors gives GPT-2's weights, which read token ids as GPT-2's BPE tokens, but --data bytes.txt gives bytes" \
  "$gpt" "${hf[@]}" --data bytes.txt
grep -qF -- "Give --tokens FILE" <<<"$out" && grep -qF -- "--bytes-as-tokens" <<<"$out" && ok "the message says how to go on" ||
  bad "--init-from with --data: $out"
refused 2 "but the generated corpus (no --data or --tokens) gives bytes as ids 0..255" "$gpt" "${hf[@]}"
run "$gpt" "${hf[@]}" --data bytes.txt --bytes-as-tokens
[ $rc -eq 0 ] && grep -q "^final_loss=" <<<"$out" && ok "--bytes-as-tokens: trains on the bytes" ||
  bad "--init-from --data --bytes-as-tokens: exit $rc: $out"
refused 2 "--bytes-as-tokens lets --init-from's GPT-2 weights train on byte data" "$gpt" "${model[@]}" --bytes-as-tokens

# ---- mpmd plan's peaks past int64 ----
# --keep 4194304T (2^62 bytes a sample) times a rank's samples in flight is
# past int64: such a peak saturates and fits no limit, where it used to
# wrap to a peak of 0 that every limit admitted
plan=(plan --ranks 4 --layers 12 --batch 32 --keep 4194304T --memory-limit 1G)
run "$mpmd" "${plan[@]}"
[ $rc -eq 2 ] && grep -q "^  43 exceed the limit" <<<"$out" && ! grep -q "chosen\|0.0 KiB" <<<"$out" &&
  grep -q "no layout fits in 1073741824 bytes per rank" <<<"$out" && ok "mpmd plan --keep 4194304T: no layout fits, exit 2" ||
  bad "mpmd plan --keep 4194304T --memory-limit 1G: exit $rc: $out"
json=$("$mpmd" "${plan[@]}" --format json 2>/dev/null)
small=$(grep -o '"peak_bytes": [0-9-]*' <<<"$json" | awk '$2 < 4611686018427387904' | wc -l)
fits=$(grep -c '"fits": true' <<<"$json")
[ "$small" -eq 0 ] && [ "$fits" -eq 0 ] && [ "$(grep -c '"peak_bytes"' <<<"$json")" -eq 43 ] &&
  ok "mpmd plan --format json: every peak at least 2^62, none fits" || bad "mpmd plan json: $small small peaks, $fits fit: $json"
run "$mpmd" plan --ranks 4 --layers 12 --batch 32 --keep 4194304T
grep -q "over 8 EiB" <<<"$out" && ! grep -q " 0.0 KiB" <<<"$out" && ok "without a limit: peaks past int64 print as over 8 EiB" ||
  bad "mpmd plan --keep 4194304T: $out"

# ---- what --help lists, and whose messages ----
# every option gpt's and llama's --help lists is one the program parses (not
# refused as an unknown option: llama lists only what it takes), each tried
# as --OPTION=x before an unknown option that stops the run; llama's errors
# name llama, not gpt (a model check, the --auto planner)
for prog in "$gpt" "$llama"; do
  name=${prog##*/}
  opts=$("$prog" --help | grep -o '^  --[a-z0-9-]*' | sed 's/^  //' | sort -u)
  n=0 unknown=""
  for o in $opts; do
    n=$((n + 1))
    run "$prog" "$o=x" --not-an-option
    grep -qF "unknown option \"$o\"" <<<"$out" && unknown+=" $o"
  done
  [ "$n" -ge 50 ] && [ -z "$unknown" ] && ok "$name --help: its $n options all parse" ||
    bad "$name --help lists $n options; refused as unknown:$unknown"
done
run "$gpt" --kv-heads 2
grep -qF 'unknown option "--kv-heads"' <<<"$out" && ! "$gpt" --help | grep -q -- "--kv-heads" &&
  ok "gpt refuses llama's --kv-heads and does not list it" || bad "gpt --kv-heads: $out"
refused 2 "llama: 3 heads do not divide the width 32" "$llama" "${model[@]}" --heads 3 --width 32
grep -q "gpt" <<<"$out" && bad "llama's model error names gpt: $out"
refused 2 "(run llama --help for the options)" "$llama" "${model[@]}" --heads 3 --width 32
refused 1 "llama: --auto: 5 ranks for 2 layers; each rank needs a layer" "$llama" "${model[@]}" --auto --ranks 5
grep -q "gpt" <<<"$out" && bad "llama's --auto error names gpt: $out"

echo "cli_misuse: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
