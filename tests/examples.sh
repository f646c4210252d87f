#!/usr/bin/env bash
# The examples as a user runs them: the GPT's final line is the same for the
# one-rank loop and every schedule (and under mpirun), a resumed run equals
# an uninterrupted one, and bad input ends with a message and the right exit
# status.
#   examples.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
gpt="$build/examples/gpt"
model=(--layers 4 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 3 --tie-embeddings --quiet)
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# the equivalence list: schedule, stages, ranks, extra options
schedules=$(cat "$src/tests/equivalence_schedules.txt")
for precision in f32 bf16; do
  ref=$("$gpt" "${model[@]}" --precision $precision | tail -n 1)
  case "$ref" in final_loss=*" params_sha256="*) ok "$precision loop: $ref" ;; *) bad "$precision loop printed: $ref" ;; esac
  while read -r name stages ranks extra; do
    line=$("$gpt" "${model[@]}" --precision $precision --schedule "$name" --stages "$stages" --ranks "$ranks" $extra 2>&1 |
      tail -n 1)
    [ "$line" = "$ref" ] && ok "$precision $name S=$stages D=$ranks $extra" ||
      bad "$precision $name S=$stages D=$ranks $extra: $line"
  done <<<"$schedules"
done
ref=$("$gpt" "${model[@]}" | tail -n 1)

# dropout (gpt) and the LLaMA example (grouped-query, with and without
# dropout): the masks are the loop's on every schedule, with remat too
llama="$build/examples/llama"
for prog in "$gpt --dropout 0.1" "$llama --heads 4 --kv-heads 2" "$llama --heads 4 --kv-heads 1 --dropout 0.2"; do
  dref=$($prog "${model[@]}" | tail -n 1)
  [ "$dref" != "$ref" ] || bad "$prog: the same line as gpt without dropout"
  while read -r name stages ranks extra; do
    line=$($prog "${model[@]}" --schedule "$name" --stages "$stages" --ranks "$ranks" $extra 2>&1 | tail -n 1)
    [ "$line" = "$dref" ] && ok "${prog##*/} $name S=$stages D=$ranks $extra" ||
      bad "${prog##*/} $name S=$stages D=$ranks $extra: $line vs the loop's $dref"
  done <<<"$schedules"
  line=$($prog "${model[@]}" --schedule zerobubble --stages 4 --remat block | tail -n 1)
  [ "$line" = "$dref" ] && ok "${prog##*/}, remat block: the same bits" || bad "${prog##*/} --remat block: $line vs $dref"
done
# --eval: the held-out loss (a forward-only step, pipelined like the
# training) is the loop's on every schedule; and it falls as training goes
eref=$("$llama" "${model[@]}" --dropout 0.1 --eval 3 | tail -n 2 | tr '\n' ' ')
case "$eref" in eval_loss=*" final_loss="*) ok "llama --eval: $eref" ;; *) bad "llama --eval printed: $eref" ;; esac
while read -r name stages ranks extra; do
  line=$("$llama" "${model[@]}" --dropout 0.1 --eval 3 --schedule "$name" --stages "$stages" --ranks "$ranks" $extra 2>&1 |
    tail -n 2 | tr '\n' ' ')
  [ "$line" = "$eref" ] && ok "--eval, $name S=$stages D=$ranks" || bad "--eval, $name: $line vs the loop's $eref"
done <<<"$schedules"
evals=$("$gpt" "${model[@]}" --steps 12 --eval 4 --json --schedule std1f1b --stages 2 |
  sed -n 's/^{"step": [0-9]*, "eval_loss": \([0-9.]*\)}$/\1/p' | tr '\n' ' ')
awk -v e="$evals" 'BEGIN { n = split(e, v, " "); exit !(n == 3 && v[3] < v[1]) }' &&
  ok "--eval every 4 of 12 steps: $evals" || bad "--eval every 4 steps: held-out losses $evals"

# the LLaMA example learns: 40 steps bring the loss from ln(256) = 5.55 below 3
line=$("$llama" --layers 2 --width 64 --heads 4 --kv-heads 2 --seq 32 --steps 40 --quiet | tail -n 1)
loss=${line#final_loss=}; loss=${loss%% *}
awk -v l="$loss" 'BEGIN { exit !(l < 3.0) }' && ok "llama learns: $line" || bad "llama's loss after 40 steps: $line"

# rematerialisation changes no number
for remat in block dots; do
  line=$("$gpt" "${model[@]}" --remat $remat --schedule zerobubble --stages 4 | tail -n 1)
  [ "$line" = "$ref" ] && ok "--remat $remat, zerobubble: the same bits" || bad "--remat $remat: $line vs $ref"
done

# --auto under a memory limit: the chosen layout fits on every rank, and it
# trains to the bits of the same configuration run as the loop
auto=$("$gpt" "${model[@]}" --auto --ranks 2 --memory-limit 900K --json 2>/dev/null | tail -n 1)
field() { sed -n "s/.*\"$1\": \"\{0,1\}\([^,\"}]*\).*/\1/p" <<<"$auto"; }
a_stages=$(field stages) a_micro=$(field microbatches) a_remat=$(field remat)
peaks=$(grep -o '"peak_bytes_planned": [0-9]*' <<<"$auto" | grep -o '[0-9]*$')
over=0
for p in $peaks; do [ "$p" -le 921600 ] || over=1; done
auto_line="final_loss=$(field final_loss) params_sha256=$(field params_sha256)"
same=$("$gpt" "${model[@]}" --stages "$a_stages" --balance-stages --microbatches "$a_micro" --remat "$a_remat" | tail -n 1)
[ -n "$peaks" ] && [ $over -eq 0 ] && [ "$auto_line" = "$same" ] &&
  ok "--auto --memory-limit 900K: $(field schedule) S=$a_stages n=$a_micro remat $a_remat fits ($(echo $peaks)) and equals its loop" ||
  bad "--auto: $auto (loop of that layout: $same)"

# data parallelism without a pipeline: the loop's replicas combine as a
# pipeline's do, so two replicas of the loop equal two of a 2-stage pipeline
dp=$("$gpt" "${model[@]}" --schedule std1f1b --stages 2 --data-parallel 2 | tail -n 1)
dploop=$("$gpt" "${model[@]}" --data-parallel 2 | tail -n 1)
[ "$dp" = "$dploop" ] && [ "$dp" != "$ref" ] && ok "loop x 2 replicas = std1f1b x 2 replicas: $dp" ||
  bad "data-parallel loop: $dploop vs pipeline $dp (one replica: $ref)"

# FSDP: each replica holds a shard of the parameters, gradients and AdamW
# state, and the numbers are plain data parallelism's, on the loop and every
# schedule (tied embeddings: a gradient summed over two ranks' shards)
line=$("$gpt" "${model[@]}" --data-parallel 2 --fsdp | tail -n 1)
[ "$line" = "$dp" ] && ok "fsdp, loop x 2 replicas: $line" || bad "fsdp loop x 2: $line vs data parallel $dp"
while read -r name stages ranks extra; do
  line=$("$gpt" "${model[@]}" --schedule "$name" --stages "$stages" --ranks "$ranks" $extra --data-parallel 2 --fsdp 2>&1 |
    tail -n 1)
  [ "$line" = "$dp" ] && ok "fsdp, $name S=$stages D=$ranks x 2 replicas" ||
    bad "fsdp, $name S=$stages D=$ranks $extra x 2: $line vs data parallel $dp"
done <<<"$schedules"
# tensor parallelism: blocks split over 2 model ranks train as the whole
# model does (float tolerance: the split sums run in another order), the
# same bits on every schedule; with FSDP and a pipeline too (3 axes)
close() { # close LINE_A LINE_B REL: the final losses agree to REL
  awk -v a="${1#final_loss=}" -v b="${2#final_loss=}" -v r="$3" \
    'BEGIN { split(a, x, " "); split(b, y, " "); d = x[1] - y[1]; if (d < 0) d = -d; exit !(d <= r * y[1]) }'
}
tp=$("$gpt" "${model[@]}" --tensor-parallel 2 | tail -n 1)
close "$tp" "$ref" 1e-5 && [ "$tp" != "$ref" ] && ok "tensor parallel 2: $tp (whole: $ref)" ||
  bad "tensor parallel 2: $tp vs the whole model's $ref"
for s in "std1f1b 2 2" "interleaved1f1b 4 2" "zerobubble 4 4"; do
  set -- $s
  line=$("$gpt" "${model[@]}" --tensor-parallel 2 --schedule "$1" --stages "$2" --ranks "$3" 2>&1 | tail -n 1)
  [ "$line" = "$tp" ] && ok "tensor parallel 2, $1 S=$2 D=$3: the split loop's bits" ||
    bad "tensor parallel 2, $1 S=$2: $line vs $tp"
done
tpdp=$("$gpt" "${model[@]}" --tensor-parallel 2 --data-parallel 2 | tail -n 1)
line=$("$gpt" "${model[@]}" --tensor-parallel 2 --data-parallel 2 --fsdp --schedule std1f1b --stages 2 | tail -n 1)
[ "$line" = "$tpdp" ] && ok "3 axes: std1f1b x fsdp 2 x tensor parallel 2 = data parallel 2 x tensor parallel 2" ||
  bad "3 axes: $line vs $tpdp"
ltp=$("$llama" "${model[@]}" --heads 4 --kv-heads 2 --tensor-parallel 2 | tail -n 1)
lw=$("$llama" "${model[@]}" --heads 4 --kv-heads 2 | tail -n 1)
close "$ltp" "$lw" 1e-5 && ok "llama, tensor parallel 2 (grouped-query heads split): $ltp" ||
  bad "llama tensor parallel 2: $ltp vs $lw"
# --eval with tensor parallelism: the evaluation step takes the training
# step's split parameters whole; its held-out loss is the whole model's to
# float tolerance, and a pipeline gives the split loop's lines bit for bit
ew=$("$gpt" "${model[@]}" --eval 2 | tail -n 2 | tr '\n' ' ')
etp=$("$gpt" "${model[@]}" --eval 2 --tensor-parallel 2 2>&1 | tail -n 2 | tr '\n' ' ')
etpp=$("$gpt" "${model[@]}" --eval 2 --tensor-parallel 2 --schedule std1f1b --stages 2 2>&1 | tail -n 2 | tr '\n' ' ')
eloss() { sed -n 's/^eval_loss=\([^ ]*\) .*/\1/p' <<<"$1"; }
case "$etp" in
  eval_loss=*" final_loss="*)
    close "final_loss=$(eloss "$etp")" "final_loss=$(eloss "$ew")" 1e-5 && [ "$etpp" = "$etp" ] &&
      ok "--eval, tensor parallel 2: $(eloss "$etp") (whole: $(eloss "$ew")), std1f1b the same" ||
      bad "--eval, tensor parallel 2: $etp / std1f1b $etpp vs the whole model's $ew" ;;
  *) bad "--eval --tensor-parallel 2 printed: $etp" ;;
esac
dp3=$("$gpt" "${model[@]}" --precision bf16 --batch 12 --schedule std1f1b --stages 2 --data-parallel 3 | tail -n 1)
line=$("$gpt" "${model[@]}" --precision bf16 --batch 12 --schedule std1f1b --stages 2 --data-parallel 3 --fsdp | tail -n 1)
[ "$line" = "$dp3" ] && ok "fsdp, bf16, std1f1b x 3 replicas (padded shards): $line" ||
  bad "fsdp bf16 x 3: $line vs data parallel $dp3"

# under mpirun when this build has MPI (a build without it says "no MPI")
probe=$("$gpt" "${model[@]}" --schedule std1f1b --stages 2 --runtime mpi 2>&1)
if ! [ -x "$(command -v mpirun)" ] || grep -q "no MPI" <<<"$probe"; then
  echo "skipped: the mpirun cases (this build has no MPI runtime, or there is no mpirun)"
else
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref" ] && ok "mpirun -np 2: $line" || bad "mpirun -np 2: $line"
  ref16=$("$gpt" "${model[@]}" --precision bf16 | tail -n 1)
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --precision bf16 --schedule std1f1b --stages 2 \
    --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$ref16" ] && ok "mpirun -np 2, bf16: $line" || bad "mpirun -np 2, bf16: $line vs $ref16"
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --data-parallel 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$dp" ] && ok "mpirun -np 2, loop x 2 replicas: $line" || bad "mpirun -np 2, loop x 2 replicas: $line vs $dp"
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --data-parallel 2 --fsdp --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$dp" ] && ok "mpirun -np 2, fsdp loop x 2 replicas: $line" || bad "mpirun -np 2, fsdp: $line vs $dp"
  line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${model[@]}" --schedule std1f1b --stages 2 --data-parallel 2 --fsdp \
    --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$dp" ] && ok "mpirun -np 4, fsdp std1f1b x 2 replicas: $line" || bad "mpirun -np 4, fsdp: $line vs $dp"
  line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${model[@]}" --schedule interleaved1f1b --stages 4 --ranks 2 \
    --data-parallel 2 --fsdp --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$dp" ] && ok "mpirun -np 4, fsdp interleaved1f1b (gathers posted a task ahead): $line" ||
    bad "mpirun -np 4, fsdp interleaved1f1b: $line vs $dp"
  line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${model[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 \
    --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$tp" ] && ok "mpirun -np 4, tensor parallel 2 x std1f1b: the in-process bits" ||
    bad "mpirun -np 4, tensor parallel: $line vs in-process $tp"
  line=$("$src/tests/mpirun.sh" shm 8 "$gpt" "${model[@]}" --tensor-parallel 2 --data-parallel 2 --fsdp \
    --schedule std1f1b --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$tpdp" ] && ok "mpirun -np 8, 3 axes (2 stages x fsdp 2 x tensor parallel 2): the in-process bits" ||
    bad "mpirun -np 8, 3 axes: $line vs $tpdp"
  out=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 \
    --runtime mpi 2>&1)
  grep -q "the mesh needs 4 (2 ranks x 1 replicas x 2 model ranks): run mpirun -np 4" <<<"$out" &&
    ok "mpirun -np 2 for a mesh of 4: named" || bad "mpirun -np 2, mesh of 4: $out"
  lref=$("$llama" "${model[@]}" --heads 4 --kv-heads 2 --dropout 0.1 | tail -n 1)
  line=$("$src/tests/mpirun.sh" shm 2 "$llama" "${model[@]}" --heads 4 --kv-heads 2 --dropout 0.1 --schedule std1f1b \
    --stages 2 --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$lref" ] && ok "mpirun -np 2, llama with dropout: $line" || bad "mpirun -np 2, llama with dropout: $line vs $lref"
  line=$("$src/tests/mpirun.sh" shm 2 "$llama" "${model[@]}" --heads 4 --kv-heads 2 --dropout 0.1 --data-parallel 2 \
    --runtime mpi 2>&1 | tail -n 1)
  lline=$("$llama" "${model[@]}" --heads 4 --kv-heads 2 --dropout 0.1 --data-parallel 2 | tail -n 1)
  [ "$line" = "$lline" ] && ok "mpirun -np 2, llama with dropout, 2 replicas: $line" ||
    bad "mpirun -np 2, llama with dropout, 2 replicas: $line vs in-process $lline"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
six=$("$gpt" "${model[@]}" --steps 6 --schedule std1f1b --stages 2 | tail -n 1)
"$gpt" "${model[@]}" --steps 3 --schedule gpipe --stages 4 --save "$tmp/ck.safetensors" >/dev/null
resumed=$("$gpt" "${model[@]}" --steps 6 --resume "$tmp/ck.safetensors" | tail -n 1)
[ "$six" = "$resumed" ] && ok "resume: 3 steps on 4 ranks + 3 on one rank = 6 straight" || bad "resume: $resumed vs $six"
# checkpoints are layout-free under FSDP: written sharded, loaded whole or
# sharded otherwise (in-process and under mpirun), the same file bytes
six=$("$gpt" "${model[@]}" --steps 6 --data-parallel 2 | tail -n 1)
"$gpt" "${model[@]}" --steps 3 --data-parallel 2 --fsdp --schedule gpipe --stages 4 --save "$tmp/fsdp.safetensors" >/dev/null
"$gpt" "${model[@]}" --steps 3 --data-parallel 2 --save "$tmp/dp.safetensors" >/dev/null
resumed=$("$gpt" "${model[@]}" --steps 6 --data-parallel 2 --resume "$tmp/fsdp.safetensors" | tail -n 1)
resumed2=$("$gpt" "${model[@]}" --steps 6 --data-parallel 2 --fsdp --schedule std1f1b --stages 2 \
  --resume "$tmp/dp.safetensors" | tail -n 1)
[ "$six" = "$resumed" ] && [ "$six" = "$resumed2" ] && cmp -s "$tmp/fsdp.safetensors" "$tmp/dp.safetensors" &&
  ok "resume: fsdp <-> plain data parallel checkpoints, the same file and the same 6 steps" ||
  bad "fsdp resume: $resumed / $resumed2 vs $six"
# a checkpoint written split over 2 model ranks resumes whole, and one
# written whole resumes split: within float tolerance of the straight runs
tp6=$("$gpt" "${model[@]}" --steps 6 --tensor-parallel 2 | tail -n 1)
"$gpt" "${model[@]}" --steps 3 --tensor-parallel 2 --save "$tmp/tp.safetensors" >/dev/null
line=$("$gpt" "${model[@]}" --steps 6 --resume "$tmp/tp.safetensors" | tail -n 1)
line2=$("$gpt" "${model[@]}" --steps 6 --tensor-parallel 2 --schedule std1f1b --stages 2 --resume "$tmp/tp.safetensors" |
  tail -n 1)
[ "$line2" = "$tp6" ] && close "$line" "$tp6" 1e-5 &&
  ok "resume: a tensor-parallel checkpoint, split again (the same bits) and whole ($line)" ||
  bad "tensor-parallel resume: $line2 / $line vs $tp6"
# --trace is JSON a parser reads, every instruction a named event: the data
# axis' collectives (plain replicas' all-reduces, FSDP's gathers and
# reduce-scatters), with tensor parallelism, and a schedule file whose path
# needs escaping
if command -v python3 >/dev/null; then
  "$build/mpmd" schedule gpipe --stages 2 --microbatches 4 >"$tmp/my\"gpipe.txt"
  for extra in "--data-parallel 2 --fsdp:all_gather for fwd_0__0:reduce_scatter %" \
               "--data-parallel 2:all_reduce %:over the replicas" "--tensor-parallel 2:fwd_1__3:bwd_0__0" \
               "--tensor-parallel 2 --data-parallel 2 --fsdp:all_gather for bwd_1__2:reduce_scatter %"; do
    args=${extra%%:*} rest=${extra#*:}
    for sched in gpipe "file:$tmp/my\"gpipe.txt"; do
      rm -f "$tmp/trace.json"
      "$gpt" "${model[@]}" $args --schedule "$sched" --stages 2 --trace "$tmp/trace.json" >/dev/null 2>&1
      out=$(python3 - "$tmp/trace.json" "${rest%%:*}" "${rest#*:}" <<'PY' 2>&1
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    trace = json.load(f)
events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
names = [e.get("name") for e in events]
bad = [n for n in names if not isinstance(n, str) or not n or not n.isprintable()]
if bad:
    sys.exit("unnamed events: %r" % bad[:3])
for want in sys.argv[2:]:
    if not any(n.startswith(want) or want in n for n in names):
        sys.exit("no event named like %r among %d" % (want, len(names)))
print("%d named events, schedule %s" % (len(events), trace["otherData"]["schedule"]))
PY
      ) && ok "--trace $args --schedule ${sched##*/}: $out" || bad "--trace $args --schedule $sched: $out"
    done
  done
else
  echo "skipped: the --trace JSON checks (no python3)"
fi
if [ -x "$(command -v mpirun)" ] && ! grep -q "no MPI" <<<"$probe"; then
  # each process loads its own model rank's part and its copy of the rest
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --steps 6 --tensor-parallel 2 --resume "$tmp/tp.safetensors" \
    --runtime mpi 2>&1 | tail -n 1)
  [ "$line" = "$tp6" ] && ok "mpirun -np 2, resume split over 2 model ranks: the in-process bits" ||
    bad "mpirun -np 2, tensor-parallel resume: $line vs $tp6"
  "$src/tests/mpirun.sh" shm 4 "$gpt" "${model[@]}" --steps 3 --data-parallel 2 --fsdp --schedule std1f1b --stages 2 \
    --runtime mpi --save "$tmp/fsdp_mpi.safetensors" >/dev/null 2>&1
  resumed=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${model[@]}" --steps 6 --data-parallel 2 --fsdp --runtime mpi \
    --resume "$tmp/dp.safetensors" 2>&1 | tail -n 1)
  cmp -s "$tmp/fsdp_mpi.safetensors" "$tmp/dp.safetensors" && [ "$six" = "$resumed" ] &&
    ok "mpirun, fsdp: saved sharded = the in-process file; resumed sharded = 6 straight" ||
    bad "mpirun fsdp checkpoints: $resumed vs $six"
fi
# with dropout: the masks of steps 4..6 are those of the straight run
six=$("$llama" "${model[@]}" --dropout 0.1 --steps 6 --schedule std1f1b --stages 2 | tail -n 1)
"$llama" "${model[@]}" --dropout 0.1 --steps 3 --schedule gpipe --stages 4 --save "$tmp/ckd.safetensors" >/dev/null
resumed=$("$llama" "${model[@]}" --dropout 0.1 --steps 6 --resume "$tmp/ckd.safetensors" | tail -n 1)
[ "$six" = "$resumed" ] && ok "resume with dropout (llama): 3 + 3 steps = 6 straight" || bad "resume with dropout: $resumed vs $six"

# --generate from a checkpoint: the same samples on one rank, pipelined on
# 2 and 4 ranks (2 sequences in flight per microbatch), and under mpirun
"$gpt" "${model[@]}" --steps 20 --save "$tmp/gen.safetensors" >/dev/null
gen=(--layers 4 --width 32 --heads 2 --seq 16 --tie-embeddings --quiet --resume "$tmp/gen.safetensors" --generate 8
  --prompt "The " --top-k 20 --batch 4 --microbatches 2)
g1=$("$gpt" "${gen[@]}" 2>&1)
[ "$(grep -c '^sample ' <<<"$g1")" -eq 4 ] && ok "--generate: $(head -n 1 <<<"$g1")" || bad "--generate printed: $g1"
for s in "--schedule gpipe --stages 2" "--schedule std1f1b --stages 4" "--schedule interleaved1f1b --stages 4 --ranks 2"; do
  line=$("$gpt" "${gen[@]}" $s 2>&1)
  [ "$line" = "$g1" ] && ok "--generate $s: the loop's samples" || bad "--generate $s: $line vs $g1"
done
if [ -x "$(command -v mpirun)" ] && ! grep -q "no MPI" <<<"$probe"; then
  line=$("$src/tests/mpirun.sh" shm 2 "$gpt" "${gen[@]}" --schedule std1f1b --stages 2 --runtime mpi 2>&1)
  [ "$line" = "$g1" ] && ok "mpirun -np 2 --generate: the loop's samples" || bad "mpirun --generate: $line vs $g1"
fi
# split over 2 model ranks (from the same whole checkpoint): the decoder's
# logits are the whole one's to float rounding, here the same samples; a
# pipeline draws the split loop's; heads the axis does not divide, named
gtp=$("$gpt" "${gen[@]}" --tensor-parallel 2 2>&1)
gtpp=$("$gpt" "${gen[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 2>&1)
loud=()
for a in "${gen[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
loud=$("$gpt" "${loud[@]}" --tensor-parallel 2 2>&1)
[ "$gtp" = "$g1" ] && [ "$gtpp" = "$g1" ] && grep -q "the one-rank loop, over 2 model ranks" <<<"$loud" &&
  ok "--generate --tensor-parallel 2: the whole decoder's samples, on std1f1b too" ||
  bad "--generate --tensor-parallel 2: $gtp / std1f1b $gtpp vs $g1 ($(tail -n 1 <<<"$loud"))"
if [ -x "$(command -v mpirun)" ] && ! grep -q "no MPI" <<<"$probe"; then
  line=$("$src/tests/mpirun.sh" shm 4 "$gpt" "${gen[@]}" --tensor-parallel 2 --schedule std1f1b --stages 2 --runtime mpi 2>&1)
  [ "$line" = "$gtp" ] && ok "mpirun -np 4 --generate --tensor-parallel 2: the in-process samples" ||
    bad "mpirun --generate --tensor-parallel 2: $line vs $gtp"
fi
out=$("$gpt" "${gen[@]}" --tensor-parallel 4 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "2 heads are not divisible by the model axis (tensor_parallel 4)" <<<"$out" &&
  ok "--generate --tensor-parallel 4 with 2 heads: exit 1, named" || bad "--generate --tensor-parallel 4: exit $rc: $out"
for case in "--generate 8:give --resume" "--generate 8 --resume $tmp/gen.safetensors --prompt 0123456789abc:between 1 and 8" \
            "--prompt x:options of --generate N" "--generate 8 --resume $tmp/gen.safetensors --data-parallel 2:training options"; do
  args=${case%%:*} want=${case#*:}
  out=$("$gpt" --layers 4 --width 32 --heads 2 --seq 16 --tie-embeddings $args 2>&1); rc=$?
  [ $rc -eq 2 ] && grep -q -- "$want" <<<"$out" && ok "gpt $args: exit 2, \"$want\"" || bad "gpt $args: exit $rc: $out"
done
# (llama's generation: tests/generate.sh) a GPT-2 checkpoint records other blocks
out=$("$llama" --layers 4 --width 32 --heads 2 --seq 16 --generate 4 --resume "$tmp/gen.safetensors" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "gen.safetensors was trained with gpt2 blocks (the gpt program); this run builds llama blocks" <<<"$out" &&
  ok "llama --generate from a GPT-2 checkpoint: exit 1, the blocks named" ||
  bad "llama --generate from gpt's checkpoint: exit $rc: $out"

# the other examples: the tutorial's pipelined runs (4 and 8 stages) equal
# its loop bit for bit; basic trains (its loss falls by 10x or more)
out=$("$build/examples/tutorial" --steps 2 --d-model 16 --seq 8 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'bitwise equal to the one-rank loop: yes' <<<"$out")" -eq 2 ] &&
  ok "tutorial: 4 and 8 stages equal the loop" || bad "tutorial: exit $rc: $out"
out=$("$build/examples/tutorial" --steps 2 --d-model 16 --seq 8 --fsdp 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'bitwise equal to it: yes' <<<"$out")" -eq 2 ] &&
  ok "tutorial --fsdp: FSDP only and the pipeline with FSDP inside equal plain data parallelism" ||
  bad "tutorial --fsdp: exit $rc: $out"
out=$("$build/examples/tutorial" --steps 2 --d-model 16 --seq 8 --tensor-parallel 2 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "the pipeline bitwise equal to the split loop: yes" <<<"$out" &&
  ok "tutorial --tensor-parallel 2: $(grep 'split loop against' <<<"$out" | sed 's/^ *//')" ||
  bad "tutorial --tensor-parallel 2: exit $rc: $out"
for sched in std1f1b zerobubble; do
  out=$("$build/examples/basic" --schedule $sched --steps 100 2>&1); rc=$?
  first=$(grep -m1 '^step' <<<"$out" | awk '{print $4}') last=$(grep '^step' <<<"$out" | tail -n 1 | awk '{print $4}')
  [ $rc -eq 0 ] && grep -q "parameters: bitwise equal to the loop's" <<<"$out" &&
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b * 3 <= a) }' &&
    ok "basic --schedule $sched: every step's loss equals the loop's, loss $first -> $last" ||
    bad "basic --schedule $sched: exit $rc: $out"
done

# gpt leaves its environment alone (no restart with OpenMP settings: the
# library's idle threads sleep by themselves), and a run's summary names the
# kernel threads per rank and why
env -u OMP_WAIT_POLICY "$gpt" --layers 2 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 100000 \
  --quiet >/dev/null 2>&1 &
pid=$! policy="" seen=0
for _ in $(seq 50); do
  [ -r "/proc/$pid/environ" ] && { seen=1; policy=$(tr '\0' '\n' <"/proc/$pid/environ" | sed -n 's/^OMP_WAIT_POLICY=//p'); break; }
  sleep 0.1
done
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ "$seen" = 1 ] && [ -z "$policy" ] && ok "gpt runs with the environment it was given (no OMP_WAIT_POLICY added)" ||
  bad "gpt without OMP_WAIT_POLICY: its environment has '$policy' (seen $seen)"
out=$(OMP_WAIT_POLICY=active "$gpt" "${model[@]}" 2>&1) && grep -q "final_loss=" <<<"$out" &&
  ok "gpt runs with OMP_WAIT_POLICY=active" || bad "gpt with OMP_WAIT_POLICY=active: $out"
out=$("$gpt" --layers 2 --width 32 --heads 2 --seq 16 --batch 8 --microbatches 4 --steps 2 --stages 2 --schedule std1f1b \
  --threads 1 2>&1)
grep -qE "^  1 kernel thread per rank \(threads_per_rank = 1 as asked\)" <<<"$out" &&
  ok "the run summary names the kernel threads per rank and why" || bad "gpt --summary: $out"

# a generic OpenBLAS kernel on a CPU with AVX2 is named, with the variable to set
if grep -qw avx2 /proc/cpuinfo; then
  out=$(OPENBLAS_CORETYPE=Prescott "$gpt" "${model[@]}" 2>&1)
  grep -q "gpt: warning: OpenBLAS runs its Prescott kernels on a CPU with AVX.*set OPENBLAS_CORETYPE=" <<<"$out" &&
    ok "generic BLAS kernels: $(grep -m1 'warning' <<<"$out")" || bad "OPENBLAS_CORETYPE=Prescott: no warning: $out"
fi

expect() { # expect STATUS PATTERN ARGS...
  local want=$1 pat=$2; shift 2
  out=$("$gpt" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -q -- "$pat" <<<"$out"; then ok "exit $rc: $pat"; else bad "gpt $*: exit $rc, output: $out"; fi
}
expect 2 "unknown option" --nope
expect 2 "--layers must be between" --layers 0
expect 2 "unknown schedule" --schedule fast
expect 2 "--precision is f32, bf16 or f16" --precision fp8
expect 2 "--remat is none, block or dots" --remat all
expect 2 "--fsdp shards over the data-parallel replicas: give --data-parallel R with R >= 2" --fsdp
expect 1 "\"block_0/attn\": 2 heads are not divisible by the model axis (tensor_parallel 4)" "${model[@]}" --tensor-parallel 4
expect 2 "the directory /nonexistent does not exist" --save /nonexistent/ck.safetensors --steps 1
expect 2 "--trace $tmp: is a directory" --schedule gpipe --stages 2 --trace "$tmp" --steps 1
expect 2 "--fuse-steady-state applies to interleaved1f1b and kimik2, not to gpipe" --schedule gpipe --stages 2 --fuse-steady-state
expect 1 "cannot read data file $tmp: Is a directory" --data "$tmp" --steps 1
expect 1 "data file /dev/zero: a device, not a file" --data /dev/zero --steps 1
expect 2 "with gradients and AdamW state; activations" --width 16384 --layers 8 --heads 16
expect 2 "--step-timeout expects seconds > 0 or off" --step-timeout 0
expect 2 "--auto needs --ranks D" --auto
expect 2 "--auto chooses the schedule" --auto --ranks 2 --schedule gpipe
expect 2 "--memory-limit expects a byte count" --auto --ranks 2 --memory-limit lots
expect 1 "no layout fits in 1024 bytes per rank; the smallest peak found is" "${model[@]}" --auto --ranks 2 --memory-limit 1K
expect 2 "not divisible by 4 microbatches" --batch 7
expect 2 "need a pipeline schedule" --ranks 2
expect 1 "needs as many ranks as stages" --schedule std1f1b --stages 1 --ranks 2 --steps 1
expect 1 "cannot open" --data /nonexistent/file --steps 1
expect 1 "loss is nan" --layers 2 --width 32 --heads 2 --seq 16 --lr 1e6 --steps 10 --quiet
expect 1 "holds 3 steps already" "${model[@]}" --steps 2 --resume "$tmp/ck.safetensors"
expect 1 'unknown backend "tpu"; this build has: cpu' --backend tpu --steps 1
# where CUDA cannot run (not built in, or no GPU) asking for it says which
out=$("$gpt" --layers 1 --width 8 --heads 1 --seq 4 --batch 1 --microbatches 1 --steps 1 --quiet --backend cuda 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then ok "the cuda backend runs here"
elif [ "$rc" -eq 1 ] && grep -Eq 'unknown backend "cuda"|the cuda backend cannot run here: no' <<<"$out"; then ok "exit 1: $out"
else bad "--backend cuda: exit $rc, output: $out"; fi
echo "examples: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
