#!/usr/bin/env bash
# ctest tokenizer_files (tests/tokenizer.cmake): text to token files and into
# the GPT example, with small byte-level tokenizers that tokenizer_tool writes
# (ids below 65536, and ids past it):
#   - `mpmd tokenize` writes llm.c's GPT-2 format (magic 20240520, version 1,
#     uint16) or its LLaMA 3 format (20240801, 7, uint32), as the vocabulary
#     needs, with the header's count equal to the ids that follow;
#   - gpt --tokens of that file and gpt --text of the text itself train to the
#     same final line (the same ids, the same batches, bit for bit);
#   - --tokens of a uint32 file without --vocab is refused with the token and
#     the vocabulary named;
#   - bad uses are errors that say what is wrong: no tokenizer, a tokenizer
#     that does not load, text that is not UTF-8, an output that cannot be
#     written (and no temporary file left), --text with --data, --text
#     without --tokenizer, --tokenizer without --text.
#
#   tokenizer_files.sh TOKENIZER_TOOL MPMD GPT
set -uo pipefail
tool=$1 mpmd=$2 gpt=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/mpmd-tokfiles.XXXXXX")
trap 'rm -rf "$work"' EXIT
fails=0
fail() {
    echo "tokenizer_files: FAIL: $*" >&2
    fails=$((fails + 1))
}
# expect STATUS PATTERN CMD...: the command exits with STATUS and its stderr has PATTERN
expect() {
    local want=$1 pattern=$2
    shift 2
    "$@" >"$work/out" 2>"$work/err"
    local got=$?
    if [ "$got" -ne "$want" ] || ! grep -qF -- "$pattern" "$work/err"; then
        fail "$* exited $got (want $want) and said: $(cat "$work/err") (wanted: $pattern)"
    fi
}
# header FILE: "magic version count" of a token file
header() { od -A n -t d4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }
final() { grep '^final_loss=' "$1"; }

"$tool" text 40000 3 "$work/text.txt" || exit 1
"$tool" narrow-json "$work/narrow.json" || exit 1
"$tool" wide-json "$work/wide.json" || exit 1
train=(--layers 2 --width 32 --heads 2 --seq 16 --batch 4 --microbatches 2 --steps 3 --quiet)

for kind in narrow wide; do
    bin=$work/$kind.bin
    if ! "$mpmd" tokenize "$work/text.txt" -o "$bin" --tokenizer "$work/$kind.json" >"$work/out" 2>&1; then
        fail "mpmd tokenize ($kind): $(cat "$work/out")"
        continue
    fi
    read -r magic version count <<<"$(header "$bin")"
    size=$(stat -c %s "$bin")
    if [ "$kind" = narrow ]; then want="20240520 1" width=2 vocab=401; else want="20240801 7" width=4 vocab=70001; fi
    [ "$magic $version" = "$want" ] || fail "$kind: header $magic $version, want $want"
    [ "$size" -eq $((1024 + count * width)) ] || fail "$kind: $size bytes for $count tokens of $width bytes"
    [ "$count" -gt 1000 ] || fail "$kind: only $count tokens"
    grep -q "tokens (vocabulary $vocab)" "$work/out" || fail "$kind: mpmd tokenize said: $(cat "$work/out")"
    # the same ids from the file and from the text: the same run
    if ! "$gpt" "${train[@]}" --tokens "$bin" --vocab "$vocab" >"$work/a" 2>&1; then
        fail "gpt --tokens $kind.bin: $(cat "$work/a")"
    elif ! "$gpt" "${train[@]}" --text "$work/text.txt" --tokenizer "$work/$kind.json" >"$work/b" 2>&1; then
        fail "gpt --text with $kind.json: $(cat "$work/b")"
    elif [ -z "$(final "$work/a")" ] || [ "$(final "$work/a")" != "$(final "$work/b")" ]; then
        fail "$kind: --tokens gave '$(final "$work/a")', --text '$(final "$work/b")'"
    else
        echo "$kind: $count tokens ($magic, version $version); --tokens and --text: $(final "$work/a")"
    fi
done

# uint32 ids against GPT-2's default vocabulary: named, refused
expect 1 "is not an id of the model's vocabulary of 50257" "$gpt" "${train[@]}" --tokens "$work/wide.bin"
# the tool's errors
expect 2 "no tokenizer" "$mpmd" tokenize "$work/text.txt" -o "$work/x.bin"
expect 2 "no output file" "$mpmd" tokenize "$work/text.txt" --tokenizer "$work/wide.json"
printf '{"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "ByteLevel"}}' >"$work/bad.json"
expect 2 "tokenizer $work/bad.json: model.vocab is empty" "$mpmd" tokenize "$work/text.txt" -o "$work/x.bin" \
    --tokenizer "$work/bad.json"
printf 'caf\xe9 au lait' >"$work/latin1.txt"
expect 2 "not UTF-8 at byte 3" "$mpmd" tokenize "$work/latin1.txt" -o "$work/x.bin" --tokenizer "$work/wide.json"
expect 1 "cannot write $work/no/such/dir/x.bin" "$mpmd" tokenize "$work/text.txt" -o "$work/no/such/dir/x.bin" \
    --tokenizer "$work/wide.json"
[ ! -e "$work/x.bin" ] || fail "a failed mpmd tokenize left $work/x.bin"
ls "$work" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$work")"
# gpt's
expect 2 "give one" "$gpt" "${train[@]}" --text "$work/text.txt" --tokenizer "$work/wide.json" --data "$work/text.txt"
expect 2 "give --tokenizer" "$gpt" "${train[@]}" --text "$work/text.txt"
expect 2 "--tokenizer encodes the text of --text FILE" "$gpt" "${train[@]}" --tokenizer "$work/wide.json"
expect 2 "model.vocab is empty" "$gpt" "${train[@]}" --text "$work/text.txt" --tokenizer "$work/bad.json"
expect 1 "text file $work/latin1.txt: tokenizer $work/wide.json: the text is not UTF-8 at byte 3" \
    "$gpt" "${train[@]}" --text "$work/latin1.txt" --tokenizer "$work/wide.json"

if [ "$fails" -ne 0 ]; then
    echo "tokenizer_files: $fails failure(s)"
    exit 1
fi
echo "tokenizer_files: ok"
