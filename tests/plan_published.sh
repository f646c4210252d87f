#!/usr/bin/env bash
# `mpmd plan` against published large-scale training runs: each row's
# stated configuration (model, GPUs, tensor and pipeline ranks, batch,
# full recomputation) goes in; the planner chooses what the row does not
# state (schedule among Megatron-LM's two, stages per rank, microbatch size
# where not stated) and predicts a throughput, which must be within 15% of
# the published one. Every row uses the same cluster preset (dgx-a100) and
# the same efficiency constants (include/mpmd_plan.h). docs/planner.md
# shows this table and where each figure comes from.
#   plan_published.sh MPMD_BINARY
set -uo pipefail
mpmd="$1"
tol=0.15
fail=0
printf '%-44s %12s %12s %7s  %s\n' "row" "published" "predicted" "ratio" "chosen layout"

# plan NAME UNIT PUBLISHED ARGS...: UNIT tflops compares the chosen layout's
# TFLOP/s a GPU counting recomputation (the paper's measure), seconds its step.
plan() {
  local name="$1" unit="$2" pub="$3"
  shift 3
  local out
  if ! out=$("$mpmd" plan --cluster dgx-a100 --vocab 51200 --seq 2048 --remat block --fsdp no \
      --schedules std1f1b,interleaved1f1b "$@" --format json 2>&1); then
    echo "FAIL: $name: mpmd plan failed: $out"
    fail=1
    return
  fi
  # the first layout is the choice
  local first pred layout
  first=$(awk '/^  \{/{print; exit}' <<<"$out")
  if [ "$unit" = tflops ]; then
    pred=$(sed -n 's/.*"hw_flops_per_gpu": \([0-9.e+-]*\).*/\1/p' <<<"$first" | awk '{printf "%.1f", $1 / 1e12}')
  else
    pred=$(sed -n 's/.*"step": \([0-9.e+-]*\).*/\1/p' <<<"$first" | awk '{printf "%.2f", $1}')
  fi
  layout=$(sed -n 's/.*"tp": \([0-9]*\), "pp": \([0-9]*\), "dp": \([0-9]*\).*"schedule": "\([a-z0-9]*\)", "stages": \([0-9]*\), "microbatch": \([0-9]*\), "microbatches": \([0-9]*\).*/tp \1 pp \2 dp \3, \4 S=\5, mb \6 (\7)/p' <<<"$first")
  if [ -z "$pred" ]; then
    echo "FAIL: $name: no prediction in: $first"
    fail=1
    return
  fi
  # throughput ratio: predicted / published (for step times, published / predicted)
  local ratio
  ratio=$(awk -v p="$pred" -v q="$pub" -v u="$unit" 'BEGIN{printf "%.3f", u == "tflops" ? p / q : q / p}')
  printf '%-44s %12s %12s %7s  %s\n' "$name" "$pub" "$pred" "$ratio" "$layout"
  if ! awk -v r="$ratio" -v t="$tol" 'BEGIN{exit !(r >= 1 - t && r <= 1 + t)}'; then
    echo "FAIL: $name: predicted throughput $ratio x the published, outside 1 +- $tol"
    fail=1
  fi
}

# Narayanan et al. 2021 (arXiv 2104.04473), Table 1: GPT, vocabulary 51200,
# sequence 2048, A100 80GB on Selene; TFLOP/s a GPU by the paper's equation (3).
g() { echo "--layers $1 --hidden $2 --heads $3 --tp $4 --pp $5 --gpus $6 --batch $7"; }
plan "Narayanan21 T1 1.7B (32 GPUs)" tflops 137 $(g 24 2304 24 1 1 32 512)
plan "Narayanan21 T1 3.6B (64 GPUs)" tflops 138 $(g 30 3072 32 2 1 64 512)
plan "Narayanan21 T1 7.5B (128 GPUs)" tflops 142 $(g 36 4096 32 4 1 128 512)
plan "Narayanan21 T1 18.4B (256 GPUs)" tflops 135 $(g 40 6144 48 8 1 256 1024)
plan "Narayanan21 T1 39.1B (512 GPUs)" tflops 138 $(g 48 8192 64 8 2 512 1536)
plan "Narayanan21 T1 76.1B (1024 GPUs)" tflops 140 $(g 60 10240 80 8 4 1024 1792)
plan "Narayanan21 T1 145.6B (1536 GPUs)" tflops 148 $(g 80 12288 96 8 8 1536 2304)
plan "Narayanan21 T1 310.1B (1920 GPUs)" tflops 155 $(g 96 16384 128 8 16 1920 2160)
plan "Narayanan21 T1 529.6B (2520 GPUs)" tflops 163 $(g 105 20480 128 8 35 2520 2520)
plan "Narayanan21 T1 1008.0B (3072 GPUs)" tflops 163 $(g 128 25600 160 8 64 3072 3072)
# Korthikanti et al. 2022 (arXiv 2205.05198), Table 5, "full recompute"
# step times of the Table 3 configurations (no data parallelism).
plan "Korthikanti22 T5 22B full recompute (8 GPUs)" seconds 1.42 $(g 48 6144 64 8 1 8 4) --microbatch 4
plan "Korthikanti22 T5 175B full recompute (64 GPUs)" seconds 18.13 $(g 96 12288 96 8 8 64 64) --microbatch 1
plan "Korthikanti22 T5 530B full recompute (280 GPUs)" seconds 49.05 $(g 105 20480 128 8 35 280 280) --microbatch 1
plan "Korthikanti22 T5 1T full recompute (512 GPUs)" seconds 94.42 $(g 128 25600 160 8 64 512 512) --microbatch 1
[ $fail = 0 ] && echo "plan_published: every row within 15% of its published throughput"
exit $fail
