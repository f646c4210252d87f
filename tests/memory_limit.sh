#!/usr/bin/env bash
# Under an address-space limit (ulimit -v) a run ends, never hangs: OpenBLAS
# retries forever a work buffer the limit refuses, so the step checks the
# limit before its threads start (a clear error naming ulimit -v), and the
# watchdog of a lone rank ends a run stuck anyway. For limits from what the
# program needs to start (below it OpenBLAS's initialisation, before main,
# retries forever: those are left out) to plenty, the GPT example on the
# loop, a pipeline and two replicas must each finish within a minute:
# trained, or refused with the message.
#   memory_limit.sh BUILD_DIR
set -uo pipefail
gpt="$1/examples/gpt"
model=(--layers 2 --width 64 --steps 1 --quiet --step-timeout 20)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trained=0 refused=0
# the least limit (in steps of 100 MiB) under which the program starts at
# all: below it OpenBLAS's own initialisation (before main) retries its
# first work buffer forever, out of the program's reach (--help computes
# nothing); the limits tried run from there to 1.5 GiB above it (what the
# program maps depends on the build: CUDA's libraries, say)
start=0
for kib in $(seq 204800 102400 8192000); do
  if (ulimit -v $kib; exec timeout 5 "$gpt" --help >/dev/null 2>&1); then start=$kib; break; fi
done
[ "$start" -gt 0 ] || { echo "FAIL: the program does not start under any limit up to 8 GiB"; exit 1; }
echo "the program starts under ulimit -v $start KiB"
for layout in "" "--schedule std1f1b --stages 2" "--data-parallel 2"; do
  for step in 0 1 2 3 4 5 6 8 10 15; do
    kib=$((start + step * 102400))
    (ulimit -v $kib; exec timeout 60 "$gpt" "${model[@]}" $layout >"$tmp/out" 2>"$tmp/err")
    rc=$?
    what="ulimit -v $kib ${layout:-(loop)}"
    if [ $rc -eq 0 ] && grep -q "^final_loss=" "$tmp/out"; then
      trained=$((trained + 1)); ok "$what: trained"
    elif [ $rc -eq 124 ]; then
      bad "$what: still running after 60 s (a hang)"
    elif grep -q "address-space limit (ulimit -v)" "$tmp/err"; then
      refused=$((refused + 1)); ok "$what: refused: $(head -c 160 "$tmp/err")"
    elif [ $rc -eq 1 ] && grep -q "^gpt: .*\(out of memory\|address-space limit\|could start only\)" "$tmp/err"; then
      ok "$what: ended with a message: $(head -c 160 "$tmp/err")"
    elif [ $rc -eq 127 ] || grep -q "error while loading shared libraries\|failed to map segment" "$tmp/err"; then
      ok "$what: the limit is below what loading the program needs (exit $rc)"
    else
      bad "$what: exit $rc: $(cat "$tmp/err")"
    fi
  done
done
[ $trained -gt 0 ] && [ $refused -gt 0 ] && ok "some limits trained ($trained), some refused ($refused)" ||
  bad "the limits tried trained $trained times and were refused $refused times: both should happen"
echo "memory_limit: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
