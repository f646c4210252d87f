#!/usr/bin/env bash
# The gpt program's checkpoints as a run on a cluster meets them.
#
#   gpt_checkpoints.sh BUILD_DIR SOURCE_DIR signals
#     - SIGTERM between steps stops after that step with exit status 143
#       and a checkpoint that --resume latest continues bit for bit as a
#       straight run; SIGINT without --save exits 130 saving nothing, and
#       is left ignored when the program starts with it ignored;
#     - SIGTERM while a checkpoint is written: the write completes, the stop
#       is saved, no temporary file is left and every file verifies;
#     - a second signal while a checkpoint is written stops at once and
#       removes its temporary file, the older checkpoints intact;
#     - --save-every 1 --keep-last 3 keeps exactly the 3 newest checkpoints
#       written (saves due while one is still written are skipped and say
#       so); --save-every alone keeps writing one file;
#     - --resume latest skips a damaged newest file (and a damaged --save
#       file) naming it and why, and continues bit for bit; none that loads
#       is an error; none at all starts at step 1;
#     - a failed periodic save (a name taken by a directory; a file-size
#       limit; a full tmpfs where user namespaces allow mounting one) warns
#       and training goes on, the previous checkpoint intact; a failed final
#       save is exit status 1;
#     - under mpirun, a SIGTERM reaching one process only, and a SIGUSR1
#       sent to mpirun, stop every process after the same step, and
#       --resume latest continues bit for bit.
#
#   gpt_checkpoints.sh BUILD_DIR SOURCE_DIR model
#     a checkpoint records the options that shape the model: those left out
#     of a resume come from it (the same run as with them given); resuming or
#     generating with another (--heads, --width, --seq, --tie-embeddings,
#     llama's --kv-heads and --rope-base, the other program) is refused
#     naming both values; llama's record holds norm-eps and rope-scaling, and
#     one without them (older) loads with the defaults; an untied weights export under --generate
#     --tie-embeddings is refused; what may change (lr, batch, layout,
#     precision) may; a checkpoint without the record (an older one) loads
#     as before.
#
# MPMD_TEST_QUICK=1 (the sanitizer build) uses a smaller model where a
# checkpoint must take a while to write.
set -uo pipefail
build=$1 src=$2 what=$3
gpt="$build/examples/gpt"
llama="$build/examples/llama"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

small=(--layers 2 --width 64 --heads 2 --seq 32 --batch 8 --microbatches 2)
# a checkpoint of this one takes a while to write (150 MB; 40 MB quick)
if [ -n "${MPMD_TEST_QUICK:-}" ]; then
  big=(--layers 4 --width 256 --heads 4 --seq 8 --batch 2 --microbatches 1)
else
  big=(--layers 4 --width 512 --heads 4 --seq 8 --batch 2 --microbatches 1)
fi

# verify FILE...: both checksums of each checkpoint (docs/checkpoints.md);
# prints the steps they hold
verify() {
  python3 - "$@" <<'EOF'
import hashlib, json, struct, sys
for p in sys.argv[1:]:
    raw = open(p, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    meta = json.loads(raw[8:8 + n])["__metadata__"]
    if hashlib.sha256(raw[8 + n:]).hexdigest() != meta["sha256"]:
        sys.exit(p + ": data checksum")
    blank = raw[:8 + n].replace(meta["header_sha256"].encode(), b"0" * 64, 1)
    if hashlib.sha256(blank).hexdigest() != meta["header_sha256"]:
        sys.exit(p + ": header checksum")
    print(meta["step"])
EOF
}
# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN
wait_for() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}
# wait_tmp DIR SECONDS: until DIR holds a temporary file of the atomic writer
wait_tmp() {
  local i
  for ((i = 0; i < $2 * 50; i++)); do
    compgen -G "$1/*.tmp.*" >/dev/null && return 0
    sleep 0.02
  done
  return 1
}
no_tmp() { ! compgen -G "$1/*.tmp.*" >/dev/null; }
final() { "$@" 2>/dev/null | tail -n 1; }
# series DIR: the steps of the series files there, ascending
series() { (cd "$1" && ls) | sed -n 's/^run\.step0*\([0-9][0-9]*\)\.safetensors$/\1/p' | sort -n | tr '\n' ' '; }

signals() {
  # ---- SIGTERM between steps ----------------------------------------------
  local d=$tmp/term
  mkdir -p "$d"
  "$gpt" "${small[@]}" --steps 100000 --save "$d/run.safetensors" --save-every 10 --keep-last 2 --log-every 5 \
    >"$d/out" 2>"$d/err" &
  local pid=$!
  pids+=("$pid")
  wait_for "$d/out" "^step 20/" 120 || bad "SIGTERM: no progress line"
  kill -TERM "$pid"
  wait "$pid"
  local rc=$?
  local s
  s=$(sed -n 's/^gpt: SIGTERM: stopped after step \([0-9]*\) of 100000; saved .*run\.step0*\1\.safetensors .*/\1/p' "$d/err")
  if [ "$rc" -eq 143 ] && [ -n "$s" ] && grep -q "SIGTERM: stopping after this step" "$d/err" && no_tmp "$d"; then
    ok "SIGTERM between steps: exit 143, stopped after step $s, saved"
  else
    bad "SIGTERM between steps: exit $rc, $(cat "$d/err")"
    s=20
  fi
  local steps
  steps=$(verify "$d"/run.step*.safetensors | tr '\n' ' ')
  case " $steps" in *" $s ") ok "the series after the stop verifies: steps $steps" ;;
    *) bad "after the stop the series holds steps '$steps', want $s newest" ;; esac
  [ "$(series "$d" | wc -w)" -le 2 ] || bad "--keep-last 2 left $(series "$d")"
  local n=$((s + 4)) straight resumed
  straight=$(final "$gpt" "${small[@]}" --steps $n --quiet)
  resumed=$("$gpt" "${small[@]}" --steps $n --save "$d/run.safetensors" --save-every 10 --keep-last 2 \
    --resume latest 2>&1)
  if grep -q "resumed from $d/run.step0*$s.safetensors after step $s" <<<"$resumed" &&
    [ "$(tail -n 1 <<<"$resumed")" = "$straight" ]; then
    ok "--resume latest after SIGTERM: $n steps as a straight run ($straight)"
  else
    bad "--resume latest after SIGTERM: $(tail -n 3 <<<"$resumed") vs straight $straight"
  fi

  # ---- SIGINT, no --save ----------------------------------------------------
  d=$tmp/int
  mkdir -p "$d"
  # (with job control: a script's background job starts with SIGINT ignored,
  # and the program leaves a signal ignored that it was started with)
  set -m
  "$gpt" "${small[@]}" --steps 100000 --log-every 5 >"$d/out" 2>"$d/err" &
  pid=$!
  set +m
  pids+=("$pid")
  wait_for "$d/out" "^step 5/" 120
  kill -INT "$pid"
  wait "$pid"
  rc=$?
  [ "$rc" -eq 130 ] && grep -q "gpt: SIGINT: stopped after step [0-9]* of 100000 (no --save: nothing saved)" "$d/err" &&
    ok "SIGINT without --save: exit 130, nothing saved" || bad "SIGINT: exit $rc, $(cat "$d/err")"
  "$gpt" "${small[@]}" --steps 100000 --log-every 5 >"$d/out2" 2>"$d/err2" &
  pid=$!
  pids+=("$pid")
  wait_for "$d/out2" "^step 5/" 120
  kill -INT "$pid"
  sleep 0.5
  local alive=no
  kill -0 "$pid" 2>/dev/null && alive=yes
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  [ "$alive" = yes ] && [ "$rc" -eq 143 ] && ! grep -q SIGINT "$d/err2" &&
    ok "SIGINT ignored from the start (a script's background job) stays ignored; SIGTERM stops the run" ||
    bad "an ignored SIGINT: alive $alive, exit $rc, $(cat "$d/err2")"

  # ---- SIGTERM while a checkpoint is written ---------------------------------
  d=$tmp/during
  mkdir -p "$d"
  "$gpt" "${big[@]}" --steps 100000 --save "$d/run.safetensors" --save-every 1 --keep-last 2 --quiet \
    >"$d/out" 2>"$d/err" &
  pid=$!
  pids+=("$pid")
  if ! wait_tmp "$d" 120; then bad "no checkpoint was ever being written"; fi
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  s=$(sed -n 's/^gpt: SIGTERM: stopped after step \([0-9]*\) of .*/\1/p' "$d/err")
  steps=$(verify "$d"/run.step*.safetensors 2>&1 | tr '\n' ' ')
  if [ "$rc" -eq 143 ] && [ -n "$s" ] && no_tmp "$d" && ! grep -q checksum <<<"$steps" &&
    case " $steps" in *" $s ") true ;; *) false ;; esac; then
    ok "SIGTERM during a save: exit 143, no temporary file, the series verifies (steps $steps, stopped after $s)"
  else
    bad "SIGTERM during a save: exit $rc, steps '$steps', files: $(ls "$d"), $(cat "$d/err")"
  fi
  n=$((s + 1))
  straight=$(final "$gpt" "${big[@]}" --steps $n --quiet)
  resumed=$(final "$gpt" "${big[@]}" --steps $n --save "$d/run.safetensors" --resume latest --quiet)
  [ "$resumed" = "$straight" ] && ok "resumed after a stop during a save: $straight" ||
    bad "resumed after a stop during a save: $resumed vs $straight"
  rm -rf "$d"

  # ---- a second signal while a checkpoint is written -------------------------
  d=$tmp/twice
  mkdir -p "$d"
  "$gpt" "${big[@]}" --steps 100000 --save "$d/run.safetensors" --save-every 1 --keep-last 3 --quiet \
    >"$d/out" 2>"$d/err" &
  pid=$!
  pids+=("$pid")
  # a checkpoint written, and the next one being written
  local i
  for ((i = 0; i < 2400; i++)); do [ -n "$(series "$d")" ] && break; sleep 0.05; done
  wait_tmp "$d" 120
  kill -TERM "$pid"
  wait_for "$d/err" "stopping after this step" 60
  local writing=no
  compgen -G "$d/*.tmp.*" >/dev/null && writing=yes
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  steps=$(verify "$d"/run.step*.safetensors 2>&1 | tr '\n' ' ')
  if [ "$rc" -eq 143 ] && grep -q "gpt: SIGTERM again: stopped at once" "$d/err" && no_tmp "$d" &&
    ! grep -q "stopped after step" "$d/err" && [ -n "$(series "$d")" ] &&
    verify "$d"/run.step*.safetensors >/dev/null 2>&1; then
    ok "a second SIGTERM (a write in flight: $writing): exit 143 at once, no temporary file, the series verifies ($steps)"
  else
    bad "a second SIGTERM: exit $rc, steps '$steps', files: $(ls "$d"), $(cat "$d/err")"
  fi
  rm -rf "$d"

  # ---- rotation ----------------------------------------------------------------
  d=$tmp/rotate
  mkdir -p "$d"
  "$gpt" "${small[@]}" --steps 30 --save "$d/run.safetensors" --save-every 1 --keep-last 3 --quiet \
    >"$d/out" 2>"$d/err"
  rc=$?
  local skipped written want
  skipped=" $(sed -n 's/^gpt: step \([0-9]*\): the checkpoint of step [0-9]* is still being written; this one is skipped$/\1/p' \
    "$d/err" | tr '\n' ' ')"
  written=""
  for ((k = 1; k < 30; k++)); do case "$skipped" in *" $k "*) ;; *) written="$written $k" ;; esac; done
  want=$(tr ' ' '\n' <<<"$written" | sed '/^$/d' | tail -n 3 | tr '\n' ' ')
  if [ "$rc" -eq 0 ] && [ "$(series "$d")" = "$want" ] && verify "$d/run.safetensors" "$d"/run.step*.safetensors >/dev/null &&
    [ "$(tail -n 1 "$d/out")" = "$(final "$gpt" "${small[@]}" --steps 30 --quiet)" ]; then
    ok "--keep-last 3: the 3 newest written are kept (steps $want; skipped:$skipped), the final line unchanged"
  else
    bad "--keep-last 3: kept '$(series "$d")', want '$want' (skipped:$skipped), exit $rc"
  fi
  rm -rf "$d"
  mkdir -p "$d"
  "$gpt" "${small[@]}" --steps 9 --save "$d/run.safetensors" --save-every 3 --quiet >/dev/null 2>&1
  [ "$(ls "$d")" = "run.safetensors" ] && [ "$(verify "$d/run.safetensors")" = 9 ] &&
    ok "--save-every without --keep-last: one file, as before" || bad "--save-every alone left: $(ls "$d")"

  # ---- --resume latest past damaged files ------------------------------------
  d=$tmp/latest
  mkdir -p "$d"
  local out
  out=$("$gpt" "${small[@]}" --steps 4 --save "$d/run.safetensors" --resume latest --save-every 2 --keep-last 9 2>&1)
  grep -q -- "--resume latest: no checkpoint of $d/run.safetensors yet, starting at step 1" <<<"$out" &&
    [ "$(tail -n 1 <<<"$out")" = "$(final "$gpt" "${small[@]}" --steps 4 --quiet)" ] &&
    ok "--resume latest with no checkpoint yet: starts at step 1" || bad "--resume latest, none yet: $out"
  # one command line, run three times: each run's first periodic save is
  # never skipped, so the series is steps 2, 6 and 10, the --save file 12
  for n in 8 12; do
    "$gpt" "${small[@]}" --steps $n --save "$d/run.safetensors" --resume latest --save-every 2 --keep-last 9 \
      --quiet >/dev/null 2>&1
  done
  local list newest=10 older=6
  list=$(series "$d")
  case " $list" in *" 2 6 10 ") ;; *) bad "the series of three runs: $list, want 2 6 10 among them" ;; esac
  # the --save file (step 12): a data byte flipped; the newest series file: its header cut
  python3 - "$d/run.safetensors" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-100] ^= 0x40
open(p, "wb").write(b)
EOF
  local nf
  nf=$(printf "%s/run.step%06d.safetensors" "$d" "$newest")
  head -c 200 "$nf" >"$nf.cut" && mv "$nf.cut" "$nf"
  out=$("$gpt" "${small[@]}" --steps 14 --save "$d/run.safetensors" --resume latest 2>&1)
  if grep -q "warning: --resume latest: skipping $d/run.safetensors: .*data checksum mismatch" <<<"$out" &&
    grep -q "warning: --resume latest: skipping $nf: .*" <<<"$out" &&
    grep -q "resumed from $(printf "%s/run.step%06d.safetensors" "$d" "$older") after step $older" <<<"$out" &&
    [ "$(tail -n 1 <<<"$out")" = "$(final "$gpt" "${small[@]}" --steps 14 --quiet)" ]; then
    ok "--resume latest skips the damaged --save file and newest step $newest, continues from step $older bit for bit"
  else
    bad "--resume latest past damaged files: $out"
  fi
  for f in "$d"/run*.safetensors; do head -c 100 "$f" >"$f.cut" && mv "$f.cut" "$f"; done
  out=$("$gpt" "${small[@]}" --steps 14 --save "$d/run.safetensors" --resume latest 2>&1)
  rc=$?
  [ "$rc" -eq 1 ] && grep -q -- "--resume latest: none of the [0-9]* checkpoints of $d/run.safetensors loads" <<<"$out" &&
    ok "--resume latest when none loads: exit 1" || bad "--resume latest, all damaged: exit $rc, $out"

  # ---- failed periodic saves -------------------------------------------------
  d=$tmp/failed
  mkdir -p "$d/run.step000002.safetensors" # a directory where the series file of step 2 goes
  out=$("$gpt" "${small[@]}" --steps 6 --save "$d/run.safetensors" --save-every 2 --keep-last 2 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] &&
    grep -q "gpt: warning: the checkpoint of step 2 was not saved: .*cannot write $d/run.step000002.safetensors.*; training goes on" <<<"$out" &&
    [ "$(tail -n 1 <<<"$out")" = "$(final "$gpt" "${small[@]}" --steps 6 --quiet)" ] &&
    [ "$(verify "$d/run.safetensors")" = 6 ] && no_tmp "$d"; then
    ok "a failed periodic save warns, training goes on to the same final line and the final save"
  else
    bad "a failed periodic save: exit $rc, $out"
  fi
  rm -rf "$d"
  mkdir -p "$d"
  "$gpt" "${small[@]}" --steps 2 --save "$d/run.safetensors" --save-every 2 --keep-last 1 --quiet >/dev/null 2>&1
  mv "$d/run.safetensors" "$d/run.step000002.safetensors" # as a run stopped after step 2 leaves it
  local sum
  sum=$(cksum <"$d/run.step000002.safetensors")
  # a file-size limit: every write fails as on a full disk
  out=$(ulimit -f 64 && "$gpt" "${small[@]}" --steps 8 --save "$d/run.safetensors" --save-every 2 --keep-last 1 \
    --resume latest 2>&1)
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "gpt: warning: the checkpoint of step 4 was not saved: .*File too large" <<<"$out" &&
    grep -q "gpt: mpmd_step_save: cannot write $d/run.safetensors: .*File too large" <<<"$out" &&
    ! grep -q final_loss <<<"$out" && [ "$(cksum <"$d/run.step000002.safetensors")" = "$sum" ] &&
    [ ! -e "$d/run.safetensors" ] && no_tmp "$d"; then
    ok "under a file-size limit: periodic saves warn, the final one fails (exit 1), the old checkpoint intact"
  else
    bad "under a file-size limit: exit $rc, $out; files: $(ls "$d")"
  fi
  # a full file system, where this machine lets a user namespace mount a tmpfs
  local size
  size=$(stat -c %s "$d/run.step000002.safetensors")
  if command -v unshare >/dev/null && unshare -rm true 2>/dev/null; then
    rm -rf "$d" && mkdir -p "$d/mnt"
    out=$(unshare -rm sh -c 'mount -t tmpfs -o size=$1 tmpfs "$2" && shift 2 && exec "$@"' sh \
      "$((size * 3 / 2 / 1024))k" "$d/mnt" \
      "$gpt" "${small[@]}" --steps 8 --save "$d/mnt/run.safetensors" --save-every 2 --keep-last 1 2>&1)
    rc=$?
    # (unshare's mount is gone with its namespace: the test sees the output only)
    if [ "$rc" -eq 1 ] && grep -q "cannot write $d/mnt/run.safetensors: .*No space left on device" <<<"$out" &&
      ! grep "warning: the checkpoint of step" <<<"$out" | grep -v -q "No space left on device"; then
      ok "a full tmpfs: periodic saves after the first warn (or are skipped), the final save fails (exit 1)"
    else
      bad "a full tmpfs: exit $rc, $out"
    fi
  else
    echo "skipped: the full tmpfs case (no user namespaces to mount one in)"
  fi
  rm -rf "$d"

  # ---- under mpirun ---------------------------------------------------------
  local probe mpi=("$src/tests/mpirun.sh" shm 2)
  probe=$("$gpt" --runtime mpi --steps 1 2>&1)
  if ! [ -x "$(command -v mpirun)" ] || grep -q "no MPI" <<<"$probe"; then
    echo "skipped: the mpirun cases (this build has no MPI runtime, or there is no mpirun)"
    return
  fi
  # (the watchdog ends a process left waiting for a peer that stopped alone)
  local pipe=(--schedule std1f1b --stages 2 --runtime mpi --step-timeout 60)
  d=$tmp/mpi
  mkdir -p "$d"
  "${mpi[@]}" "$gpt" "${small[@]}" "${pipe[@]}" --steps 100000 --save "$d/run.safetensors" --save-every 5 \
    --keep-last 2 --quiet >"$d/out" 2>"$d/err" &
  local mp=$!
  pids+=("$mp")
  local i
  for ((i = 0; i < 2400; i++)); do [ -n "$(series "$d")" ] && break; sleep 0.05; done
  local kids
  mapfile -t kids < <(pgrep -P "$mp")
  # one process of the two: the other learns of it when they agree after the step
  kill -TERM "${kids[${#kids[@]} - 1]}"
  wait "$mp"
  rc=$?
  s=$(sed -n 's/^gpt: SIGTERM: stopped after step \([0-9]*\) of 100000; saved .*/\1/p' "$d/err")
  if [ "$rc" -eq 143 ] && [ -n "$s" ] && no_tmp "$d" && verify "$d"/run.step*.safetensors | grep -qx "$s"; then
    ok "mpirun -np 2, SIGTERM to one process (of ${kids[*]}): both stop after step $s, exit 143, saved"
  else
    bad "mpirun, SIGTERM to one process: exit $rc, $(cat "$d/err")"
    s=5
  fi
  n=$((s + 3))
  straight=$(final "$gpt" "${small[@]}" --steps $n --quiet)
  resumed=$("${mpi[@]}" "$gpt" "${small[@]}" "${pipe[@]}" --steps $n --save "$d/run.safetensors" --save-every 5 \
    --keep-last 2 --resume latest --quiet 2>&1 | tail -n 1)
  [ "$resumed" = "$straight" ] && ok "mpirun --resume latest: $n steps as the straight one-rank run" ||
    bad "mpirun --resume latest: $resumed vs $straight"
  rm -rf "$d"
  mkdir -p "$d"
  # SIGUSR1 to mpirun, which passes it on to every process at once (a
  # SIGTERM it holds back for odls_base_sigkill_timeout seconds, holding the
  # processes' output meanwhile, then kills them: see gpt --help)
  "${mpi[@]}" "$gpt" "${small[@]}" "${pipe[@]}" --steps 100000 --save "$d/run.safetensors" --save-every 7 \
    --keep-last 2 --log-every 5 >"$d/out" 2>"$d/err" &
  mp=$!
  pids+=("$mp")
  wait_for "$d/out" "^step 10/" 120 || bad "mpirun: no progress line"
  kill -USR1 "$mp"
  wait "$mp"
  rc=$?
  s=$(sed -n 's/^gpt: SIGUSR1: stopped after step \([0-9]*\) of 100000; saved .*/\1/p' "$d/err")
  if [ "$rc" -eq 138 ] && [ -n "$s" ] && no_tmp "$d" && verify "$d"/run.step*.safetensors | grep -qx "$s"; then
    ok "SIGUSR1 to mpirun: every process stopped after step $s and saved, exit 138"
    n=$((s + 2))
    straight=$(final "$gpt" "${small[@]}" --steps $n --quiet)
    resumed=$(final "$gpt" "${small[@]}" --steps $n --save "$d/run.safetensors" --resume latest --quiet)
    [ "$resumed" = "$straight" ] && ok "... resumed in one process: $straight" || bad "resumed: $resumed vs $straight"
  else
    bad "SIGUSR1 to mpirun: exit $rc, $(grep -v skipped "$d/err")"
  fi
}

model() {
  local d=$tmp/model out rc
  mkdir -p "$d"
  local m=(--layers 2 --width 32 --seq 16 --batch 4 --microbatches 2 --quiet)
  expect() { # expect STATUS PATTERN PROGRAM ARGS...
    local want=$1 pat=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -eq "$want" ] && grep -qF -- "$pat" <<<"$out"; then ok "exit $rc: $pat"; else bad "$*: exit $rc, $out"; fi
  }
  "$gpt" "${m[@]}" --heads 2 --steps 3 --save "$d/h2.safetensors" >/dev/null
  expect 1 "gpt: $d/h2.safetensors was trained with --heads 2; this run has --heads 4" \
    "$gpt" "${m[@]}" --heads 4 --steps 6 --resume "$d/h2.safetensors"
  expect 1 "was trained with --width 32, --heads 2; this run has --width 64, --heads 4" \
    "$gpt" "${m[@]}" --heads 4 --width 64 --steps 6 --resume "$d/h2.safetensors"
  expect 1 "was trained with --seq 16; this run has --seq 8" "$gpt" "${m[@]}" --heads 2 --seq 8 --steps 6 \
    --resume "$d/h2.safetensors"
  expect 1 "was trained with --vocab 256; this run has --vocab 300" "$gpt" "${m[@]}" --heads 2 --vocab 300 --steps 6 \
    --resume "$d/h2.safetensors"
  expect 1 "$d/h2.safetensors was trained with no --tie-embeddings (an LM head of its own); this run has --tie-embeddings" \
    "$gpt" "${m[@]}" --heads 2 --generate 4 --resume "$d/h2.safetensors" --tie-embeddings
  expect 1 "was trained with --heads 2; this run has --heads 4" "$gpt" "${m[@]}" --heads 4 --generate 4 \
    --resume "$d/h2.safetensors"
  "$gpt" "${m[@]}" --heads 2 --steps 3 --save "$d/t.safetensors" --tie-embeddings >/dev/null
  # the options a checkpoint records and the command line leaves out come from it: the same run as with
  # them all given (here --tie-embeddings, --heads and --seq)
  local given left
  given=$(final "$gpt" "${m[@]}" --heads 2 --tie-embeddings --steps 6 --resume "$d/t.safetensors")
  left=$(final "$gpt" --batch 4 --microbatches 2 --quiet --steps 6 --resume "$d/t.safetensors")
  [[ "$given" == final_loss=* ]] && [ "$left" = "$given" ] &&
    ok "the model options from the checkpoint's record: $left" || bad "options from the record: $left vs $given"
  # what may change: lr, batch, the layout, precision
  local line
  line=$("$gpt" "${m[@]}" --heads 2 --steps 5 --resume "$d/h2.safetensors" --lr 0.001 --batch 8 --microbatches 4 \
    --schedule gpipe --stages 2 --precision bf16 2>&1 | tail -n 1)
  case "$line" in final_loss=*) ok "resumed with another lr, batch, layout and precision: $line" ;;
    *) bad "resuming with training options changed: $line" ;; esac
  # a weights export records no model: an untied head under --tie-embeddings is refused by its tensors
  "$gpt" "${m[@]}" --heads 2 --steps 3 --export-weights "$d/w.safetensors" --dtype f32 >/dev/null
  expect 1 "$d/w.safetensors holds 1 parameter this model does not have (an LM head of its own" \
    "$gpt" "${m[@]}" --heads 2 --generate 4 --resume "$d/w.safetensors" --tie-embeddings
  expect 0 "sample 3: The " "$gpt" "${m[@]}" --heads 2 --generate 4 --resume "$d/w.safetensors"
  # llama
  "$llama" "${m[@]}" --heads 4 --kv-heads 2 --steps 3 --save "$d/l.safetensors" >/dev/null
  expect 1 "llama: $d/l.safetensors was trained with --kv-heads 2; this run has --kv-heads 4" \
    "$llama" "${m[@]}" --heads 4 --kv-heads 4 --steps 5 --resume "$d/l.safetensors"
  given=$(final "$llama" "${m[@]}" --heads 4 --kv-heads 2 --steps 5 --resume "$d/l.safetensors")
  left=$(final "$llama" --batch 4 --microbatches 2 --quiet --steps 5 --resume "$d/l.safetensors")
  [[ "$given" == final_loss=* ]] && [ "$left" = "$given" ] &&
    ok "llama's model options (--kv-heads, --mlp-hidden, ...) from the record: $left" ||
    bad "llama options from the record: $left vs $given"
  expect 1 "was trained with --mlp-hidden 88; this run has --mlp-hidden 64" \
    "$llama" "${m[@]}" --heads 4 --kv-heads 2 --mlp-hidden 64 --steps 5 --resume "$d/l.safetensors"
  expect 1 "was trained with --rope-base 10000; this run has --rope-base 500" \
    "$llama" "${m[@]}" --heads 4 --kv-heads 2 --rope-base 500 --steps 5 --resume "$d/l.safetensors"
  expect 0 "final_loss=" "$llama" "${m[@]}" --heads 4 --kv-heads 2 --seq 8 --steps 5 --resume "$d/l.safetensors"
  expect 1 "gpt: $d/l.safetensors was trained with llama blocks (the llama program); this run builds gpt2 blocks" \
    "$gpt" "${m[@]}" --heads 4 --steps 5 --resume "$d/l.safetensors"
  # a checkpoint without the record (as older ones are): loads as before,
  # a wrong --heads included, and the right options continue bit for bit
  # old_record IN OUT [CONFIG]: IN with its recorded config deleted (or replaced by CONFIG), the header's
  # digest made anew
  old_record() {
    python3 - "$@" <<'EOF'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header["__metadata__"]
if len(sys.argv) > 3:
    meta["config"] = sys.argv[3]
else:
    del meta["config"]
meta["header_sha256"] = "0" * 64
text = json.dumps(header, separators=(",", ":"))
text += " " * (-(8 + len(text)) % 8)
head = struct.pack("<Q", len(text)) + text.encode()
meta["header_sha256"] = hashlib.sha256(head).hexdigest()
text2 = json.dumps(header, separators=(",", ":"))
text2 += " " * (len(text) - len(text2))
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text2)) + text2.encode() + data)
EOF
  }
  old_record "$d/h2.safetensors" "$d/old.safetensors"
  expect 0 "final_loss=" "$gpt" "${m[@]}" --heads 4 --steps 6 --resume "$d/old.safetensors"
  local straight
  straight=$(final "$gpt" "${m[@]}" --heads 2 --steps 6)
  line=$(final "$gpt" "${m[@]}" --heads 2 --steps 6 --resume "$d/old.safetensors")
  [ "$line" = "$straight" ] && ok "a checkpoint without the record continues as before: $line" ||
    bad "a checkpoint without the record: $line vs $straight"
  # a llama checkpoint recorded before norm-eps and rope-scaling were: the defaults (1e-5, none), the
  # same run as the full record's
  local rec
  rec=$(python3 -c 'import json, struct, sys; raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
print(json.loads(raw[8:8 + n])["__metadata__"]["config"])' "$d/l.safetensors")
  case "$rec" in *" norm-eps=1e-05 rope-scaling=none") ok "llama's record: $rec" ;; *) bad "llama's record: $rec" ;; esac
  old_record "$d/l.safetensors" "$d/lold.safetensors" "${rec% norm-eps=*}"
  line=$(final "$llama" --batch 4 --microbatches 2 --quiet --steps 5 --resume "$d/lold.safetensors")
  [ "$line" = "$left" ] && ok "a llama record without norm-eps and rope-scaling: the defaults, $line" ||
    bad "a llama record without norm-eps and rope-scaling: $line vs $left"
}

case "$what" in
  signals) signals ;;
  model) model ;;
  *) echo "gpt_checkpoints.sh: signals or model, got '$what'" >&2; exit 2 ;;
esac
echo "gpt_checkpoints $what: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
