#!/usr/bin/env bash
# A matched pair on open text, on a CPU: a P-EAGLE and an EAGLE-3 head of the embedded SmolLM2-135M trained alike
# (seed 0's untrained weights, the same answers of the target to the prompt mix, the same optimizer steps, side by
# side at one thread each), then both measured end to end on the mix's held-out prompts (the bench's `chat` suite),
# interleaved, so that the open-prompt comparison is one of drafting modes, not of two heads trained differently.
#
#   bash scripts/open_heads.sh [WORK]          # WORK default: build/open_heads
#
# Environment: PEAGLE_OPEN_RECORDS the records of the mix's train split trained on (default 0:1300, about 250k
# tokens: one pass at the default steps), PEAGLE_OPEN_STEPS optimizer steps of ~512 tokens per head (default 500),
# PEAGLE_OPEN_SEED (default 0), PEAGLE_OPEN_PROMPTS held-out prompts benchmarked (default 24), PEAGLE_OPEN_TOKENS new
# tokens a prompt (default 64), PEAGLE_OPEN_KS (default 3,7), PEAGLE_OPEN_DTYPE the bench's target dtype (default
# bfloat16). The committed pair (data/heads/smollm2-135m-open-matched-{peagle,eagle3},
# data/results-open-matched/<host>/<dtype>/) was made with the defaults.
#
# Writes WORK/{features/, peagle/, eagle3/, bench/, logs/}. Run again after an interruption: extraction resumes;
# training restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/together.sh
source scripts/lib/pair_recipe.sh
PY=${PEAGLE_PYTHON:-.venv/bin/python}
CLI=("$PY" -m peagle_lab.cli)
OUT=${1:-build/open_heads}
DATA=data/distill/smollm2-135m-scale.jsonl
RECORDS=${PEAGLE_OPEN_RECORDS:-0:1300}
STEPS=${PEAGLE_OPEN_STEPS:-500}
SEED=${PEAGLE_OPEN_SEED:-0}
N_BENCH=${PEAGLE_OPEN_PROMPTS:-24}
TOKENS=${PEAGLE_OPEN_TOKENS:-64}
KS=${PEAGLE_OPEN_KS:-3,7}
DTYPE=${PEAGLE_OPEN_DTYPE:-bfloat16}
mkdir -p "$OUT/logs"
T0=$(date +%s)
stamp() { echo "[open_heads] $(( $(date +%s) - T0 )) s: $*"; }

stamp "features of records $RECORDS of the mix's train split, once, for both heads"
"${CLI[@]}" extract --distilled "$DATA" --split train --records "$RECORDS" --out "$OUT/features/part-train" \
  --dtype float32 > "$OUT/logs/extract.log" 2>&1

train() {  # mode name
  pair_train "$1" "$OUT/$2" "$OUT/logs/train-$2.log" "A head from seed ${SEED}'s untrained weights (the other \
head's start) on the target's answers to records ${RECORDS} of the prompt mix's train split (scripts/open_heads.sh), \
${STEPS} optimizer steps at one thread, side by side with the other head." --data "$DATA" --split train \
    --records "$RECORDS" --features "$OUT/features" --steps "$STEPS" --seed "$SEED"
}
stamp "train both heads side by side, $STEPS optimizer steps each at one thread, from seed $SEED's untrained weights"
together peagle "train parallel peagle" eagle3 "train sequential eagle3" \
  || { rc=$?; stamp "a trainer failed (exit $rc), the other was stopped; logs in $OUT/logs/"; exit $rc; }

stamp "end to end on ${N_BENCH} held-out prompts of the mix x ${TOKENS} tokens, both heads at K=${KS}, interleaved"
"${CLI[@]}" bench --suite chat -n "$N_BENCH" --parallel-head "$OUT/peagle" --sequential-head "$OUT/eagle3" \
  --ks-parallel "$KS" --ks-sequential "$KS" --max-new-tokens "$TOKENS" --skip-drafting --oracle-ks none \
  --dtype "$DTYPE" --out "$OUT/bench" --overwrite > "$OUT/logs/bench.log" 2>&1
tail -5 "$OUT/logs/bench.log"
stamp "done"
