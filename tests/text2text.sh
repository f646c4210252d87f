#!/usr/bin/env bash
# The road from text to text (README.md, "From a Hugging Face model to
# text"), on files written here:
#   - a byte-level BPE tokenizer.json (tokenizer_tool narrow-json: the 256
#     bytes, 15 English merges, <|endoftext|> as 400) and a text of
#     sentences separated by <|endoftext|>;
#   - a LLaMA model directory in Hugging Face's layout, written with numpy
#     (tests/text2text_hf.py: config.json with an RMS epsilon of 0.01 and
#     Llama 3.1's rope_scaling, model.safetensors).
# Then:
#   1. import: llama --init-from DIR loads it; a checkpoint of the imported
#      weights records its RMS epsilon and rope scaling, and generates and
#      computes the loss as --init-from does (with those two keys taken out
#      of its record it loads, and computes another loss: the record is what
#      carries them);
#   2. fine-tune pipelined on the text (--text --tokenizer, std1f1b over 2
#      ranks), saved: the final line equals the unpipelined loop's bit for
#      bit;
#   3. generate from the saved checkpoint, the model options from its
#      record: a prompt in text, the sample printed as text that encodes
#      back to the ids the program drew (--print-ids), the same on a
#      pipeline; --eos "<|endoftext|>" ends the sample right after that
#      token, the text without it cut there; a prompt's UTF-8, newline and
#      backslash print as the help says, streamed or not;
#   4. the errors of text prompts: a prompt that is not ids without a
#      tokenizer, an --eos text that is no token, a tokenizer whose ids are
#      past the model's vocabulary, --eos text without a tokenizer.
#
#   text2text.sh LLAMA TOKENIZER_TOOL SOURCE_TESTS_DIR
set -uo pipefail
llama=$1 tool=$2 here=$3
py=/usr/bin/python3
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "text2text: $py cannot import numpy: install python3-numpy (make deps does)"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
final() { grep '^final_loss=' "$1"; }
# sample_text FILE: the first sample's text, its escapes undone, into FILE.txt (bytes)
sample_text() {
  "$py" - "$1" <<'EOF'
import re, sys
line = next(l for l in open(sys.argv[1], encoding="utf-8", newline="\n") if l.startswith("sample 0: "))
s = line[len("sample 0: "):].rstrip("\n")
out, i = bytearray(), 0
while i < len(s):
    if s[i] != "\\":
        out += s[i].encode(); i += 1
    elif s[i + 1] == "n":
        out += b"\n"; i += 2
    elif s[i + 1] == "\\":
        out += b"\\"; i += 2
    elif s[i + 1] == "x":
        out.append(int(s[i + 2:i + 4], 16)); i += 4
    else:
        sys.exit("an id that is no token: " + s[i:i + 8])
open(sys.argv[1] + ".txt", "wb").write(bytes(out))
EOF
}
# ids_of FILE: the first sample's ids line
ids_of() { sed -n 's/^ids 0: //p' "$1"; }
# le_ids FILE: a file of little-endian int32 ids as "1,2,3"
le_ids() { "$py" -c 'import sys, numpy; print(",".join(map(str, numpy.fromfile(sys.argv[1], "<i4"))))' "$1"; }

"$tool" narrow-json "$tmp/tokenizer.json" >/dev/null || exit 1
"$py" -c 'import sys; open(sys.argv[1], "w").write("the cat and the hen sat on a mat.<|endoftext|>" * 300)' "$tmp/text.txt"
"$py" "$here/text2text_hf.py" "$tmp/hf" 401 || exit 1
tok=(--tokenizer "$tmp/tokenizer.json")

# 1. import
shape=(--seq 32 --batch 8 --microbatches 4 --quiet)
"$llama" --init-from "$tmp/hf" --text "$tmp/text.txt" "${tok[@]}" --seq 32 --batch 8 --microbatches 4 --steps 1 \
  --lr 0 --save "$tmp/imported.st" >"$tmp/import" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "weights from $tmp/hf (LLaMA in Hugging Face's layout)" "$tmp/import" &&
  grep -q '^final_loss=[0-9]' "$tmp/import"; then
  ok "llama --init-from the numpy-written directory loads: $(final "$tmp/import")"
else
  bad "llama --init-from: exit $rc: $(cat "$tmp/import")"
fi
record() { "$py" -c 'import json, struct, sys; raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
print(json.loads(raw[8:8 + n])["__metadata__"]["config"])' "$1"; }
rec=$(record "$tmp/imported.st")
case "$rec" in
  *" norm-eps=0.01 rope-scaling=8,1,4,16") ok "the checkpoint records config.json's RMS epsilon and rope scaling: $rec" ;;
  *) bad "the imported checkpoint's record: $rec" ;;
esac
gen=(--generate 12 --temperature 0 --batch 1 --microbatches 1 --quiet --prompt "the hen" --print-ids)
"$llama" --init-from "$tmp/hf" "${tok[@]}" "${gen[@]}" >"$tmp/g.init" 2>&1
"$llama" --resume "$tmp/imported.st" "${tok[@]}" "${gen[@]}" >"$tmp/g.ckpt" 2>&1
if grep -q '^ids 0: ' "$tmp/g.init" && cmp -s "$tmp/g.init" "$tmp/g.ckpt"; then
  ok "--generate from the checkpoint of the imported weights is --init-from's: $(ids_of "$tmp/g.init")"
else
  bad "--init-from generated $(cat "$tmp/g.init"); its checkpoint $(cat "$tmp/g.ckpt")"
fi
"$py" - "$tmp/imported.st" "$tmp/forgot.st" <<'EOF'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
meta = header["__metadata__"]
meta["config"] = meta["config"].split(" norm-eps=")[0]
meta["header_sha256"] = "0" * 64
text = json.dumps(header, separators=(",", ":"))
text += " " * (-(8 + len(text)) % 8)
meta["header_sha256"] = hashlib.sha256(struct.pack("<Q", len(text)) + text.encode()).hexdigest()
text2 = json.dumps(header, separators=(",", ":"))
text2 += " " * (len(text) - len(text2))
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text2)) + text2.encode() + raw[8 + n:])
EOF
# the loss of step 2 under --lr 0 (the imported weights unchanged): the checkpoint's is --init-from's bit
# for bit; with norm-eps and rope-scaling taken out of its record it loads (the defaults) and computes
# another loss
data=(--text "$tmp/text.txt" "${tok[@]}" --seq 32 --batch 8 --microbatches 4 --quiet --steps 2 --lr 0)
"$llama" --init-from "$tmp/hf" "${data[@]}" >"$tmp/l.init" 2>&1
"$llama" --resume "$tmp/imported.st" "${data[@]}" >"$tmp/l.ckpt" 2>&1
"$llama" --resume "$tmp/forgot.st" "${data[@]}" >"$tmp/l.forgot" 2>&1
li=$(final "$tmp/l.init") lf=$(final "$tmp/l.forgot")
if [ -n "$li" ] && [ "$(final "$tmp/l.ckpt")" = "$li" ]; then
  ok "step 2 from the checkpoint of the imported weights is --init-from's: $li"
else
  bad "step 2: --init-from $(cat "$tmp/l.init"); its checkpoint $(cat "$tmp/l.ckpt")"
fi
if [ -n "$lf" ] && [ "${lf%% *}" != "${li%% *}" ]; then
  ok "without norm-eps and rope-scaling in its record the checkpoint loads, with the defaults: ${lf%% *}"
else
  bad "a record without norm-eps and rope-scaling: $(cat "$tmp/l.forgot") vs $li"
fi

# 2. fine-tune on the text: pipelined equals the loop, bit for bit
train=(--init-from "$tmp/hf" --text "$tmp/text.txt" "${tok[@]}" "${shape[@]}" --steps 40 --lr 0.01)
"$llama" "${train[@]}" --save "$tmp/loop.st" >"$tmp/loop" 2>&1
"$llama" "${train[@]}" --schedule std1f1b --stages 2 --ranks 2 --save "$tmp/tuned.st" >"$tmp/pipe" 2>&1
if [ -n "$(final "$tmp/loop")" ] && [ "$(final "$tmp/loop")" = "$(final "$tmp/pipe")" ]; then
  ok "fine-tuned on the text, std1f1b over 2 ranks = the loop: $(final "$tmp/pipe")"
else
  bad "fine-tuning: loop $(cat "$tmp/loop") / std1f1b $(cat "$tmp/pipe")"
fi

# 3. text from a prompt, with the options the checkpoint records
gen=(--resume "$tmp/tuned.st" "${tok[@]}" --generate 24 --temperature 0 --batch 1 --microbatches 1 --quiet
  --prompt "the cat" --print-ids)
"$llama" "${gen[@]}" >"$tmp/text.out" 2>&1
rc=$?
ids=$(ids_of "$tmp/text.out")
if [ $rc -eq 0 ] && sample_text "$tmp/text.out" && "$tool" encode "$tmp/tokenizer.json" "$tmp/text.out.txt" \
  "$tmp/text.ids" >/dev/null && [ -n "$ids" ] && [ "$(le_ids "$tmp/text.ids")" = "$ids" ] &&
  grep -q '^sample 0: the cat.*<|endoftext|>' "$tmp/text.out"; then
  ok "generated text that encodes to the ids drawn: $(head -n 1 "$tmp/text.out") ($ids)"
else
  bad "text generation: exit $rc: $(cat "$tmp/text.out") / re-encoded $(le_ids "$tmp/text.ids" 2>&1)"
fi
"$llama" "${gen[@]}" --schedule std1f1b --stages 2 >"$tmp/text.pipe" 2>&1
cmp -s "$tmp/text.pipe" "$tmp/text.out" && ok "the same text from std1f1b on 2 stages" ||
  bad "pipelined generation: $(cat "$tmp/text.pipe")"
"$llama" "${gen[@]}" --eos "<|endoftext|>" >"$tmp/eos.out" 2>&1
want=$(sed -n 's/^\(sample 0: the cat.*<|endoftext|>\).*/\1/p' "$tmp/text.out" | "$py" -c '
import sys; s = sys.stdin.read(); print(s[:s.index("<|endoftext|>") + len("<|endoftext|>")])')
eids=$(ids_of "$tmp/eos.out")
if [ "$(grep '^sample 0: ' "$tmp/eos.out")" = "$want" ] && [ "${eids##*,}" = 400 ] &&
  [ "${ids#"$eids"}" != "$ids" ] && [ ${#eids} -lt ${#ids} ]; then
  ok "--eos \"<|endoftext|>\" ends the sample after it: $want"
else
  bad "--eos \"<|endoftext|>\": $(cat "$tmp/eos.out"), expected $want"
fi

# a sample line stays one line: UTF-8 as it is (a character whose bytes are two tokens printed once
# whole, streamed or not), a newline as \n, a backslash as \\
for b in 1 2; do
  "$llama" --resume "$tmp/tuned.st" "${tok[@]}" --generate 1 --batch $b --microbatches 1 --quiet \
    --prompt "$(printf 'h\xc3\xa9 \xe2\x9c\x93 a\\b\nc')" >"$tmp/esc" 2>&1
  line=$(grep '^sample 0: ' "$tmp/esc")
  [[ "$line" == 'sample 0: hé ✓ a\\b\nc'* ]] && ok "--batch $b: the prompt's text as the line shows it: $line" ||
    bad "--batch $b: escapes: $(cat "$tmp/esc")"
done

# 4. errors
expect() { # expect STATUS PATTERN ARGS...
  local want=$1 pat=$2 out rc
  shift 2
  out=$("$llama" "$@" 2>&1)
  rc=$?
  if [ $rc -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then ok "exit $rc: $pat"; else bad "llama $*: exit $rc: $out"; fi
}
expect 2 '--prompt: "the cat" is not a list of token ids below 401 separated by commas' \
  --resume "$tmp/tuned.st" --generate 4 --prompt "the cat"
expect 2 "--eos \"<|end|>\" is no token of --tokenizer $tmp/tokenizer.json" \
  --resume "$tmp/tuned.st" "${tok[@]}" --generate 4 --eos "<|end|>"
expect 2 "--eos \"<|endoftext|>\" is not a token id: a token's text (like \"<|endoftext|>\") needs --tokenizer" \
  --resume "$tmp/tuned.st" --generate 4 --eos "<|endoftext|>"
"$tool" wide-json "$tmp/wide.json" >/dev/null
expect 2 "--prompt: \"the\" encodes to token 66001 (at 0), outside the model's vocabulary (ids 0 .. 400)" \
  --resume "$tmp/tuned.st" --tokenizer "$tmp/wide.json" --generate 4 --prompt the
expect 2 "--eos 401 is not a token of the vocabulary (ids 0 .. 400)" --resume "$tmp/tuned.st" --generate 4 --eos 401

echo "text2text: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
