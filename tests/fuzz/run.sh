#!/usr/bin/env bash
# Run every fuzzer of a fuzz build for SECONDS each, from a fresh copy of its
# seed corpus (tests/fuzz/corpus/NAME; the copy grows, the tree's does not).
#   run.sh BUILD_DIR SECONDS [SEED]
# SEED: libFuzzer's -seed (0, the default: a new one each run; CI gives a
# fixed one, so that its run explores the same inputs each time).
# A crash, a leak, a timeout (10 s for one input) or an abort of a broken
# promise fails the run; the input that did it is kept in BUILD_DIR/artifacts.
set -uo pipefail
build=$1 seconds=$2 seed=${3:-0}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/artifacts"
fail=0
for bin in "$build"/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); short=${name#fuzz_}
  corpus="$build/corpus/$short"
  rm -rf "$corpus"; mkdir -p "$corpus"
  if [ -d "$here/corpus/$short" ]; then cp "$here/corpus/$short"/* "$corpus"/ 2>/dev/null; fi
  log="$build/$name.log"
  echo "== $name: $seconds s from $(ls "$corpus" | wc -l) seeds"
  "$bin" -seed="$seed" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$name-" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: $name (exit $rc) after ${runs:-?} runs; the end of its log ($log):"
    tail -n 40 "$log"; fail=1
  else
    echo "ok: $name: ${runs:-?} runs, ${cov:-cov: ?} edges, corpus $(ls "$corpus" | wc -l) inputs"
  fi
done
exit "$fail"
