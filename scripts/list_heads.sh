#!/usr/bin/env bash
# Two heads for a narrow domain, on a CPU: the shipped P-EAGLE and EAGLE-3 heads of the embedded SmolLM2-135M, each
# continued (--init-from) on the target's own answers to the train split of the list prompts
# (data/prompts/lists-train.jsonl), side by side at one thread each, the same data and the same wall-time budget;
# then both measured end to end on the held-out list prompts (the bench's `lists` suite).
#
#   bash scripts/list_heads.sh [WORK]          # WORK default: build/list_heads
#
# Environment: PEAGLE_LIST_BUDGET seconds of training per head (default 900), PEAGLE_LIST_PROMPTS held-out prompts
# benchmarked (default 16), PEAGLE_LIST_KS the K swept for each head (default 1,3,5,7), PEAGLE_LIST_SEED the training
# seed of both heads (default 0: their initial weights and data order). A matched pair instead of two
# continuations: PEAGLE_LIST_INIT=fresh starts both heads from the same seeded untrained weights (the two modes share
# one architecture, so one seed draws the same numbers for both) and PEAGLE_LIST_STEPS=N trains each for exactly N
# optimizer steps of ~512 tokens (the same token budget) instead of the time budget. PEAGLE_LIST_DISTILLED=FILE uses
# answers already distilled (data/distill/smollm2-135m-lists.jsonl) instead of asking the target again. The committed
# matched pair (data/heads/smollm2-135m-lists-matched-{peagle,eagle3}, data/results-lists-matched/) was made with
#
#   PEAGLE_LIST_INIT=fresh PEAGLE_LIST_STEPS=1000 PEAGLE_LIST_PROMPTS=48 PEAGLE_LIST_KS=3,5,7 \
#     PEAGLE_LIST_DISTILLED=data/distill/smollm2-135m-lists.jsonl bash scripts/list_heads.sh build/list_heads_matched
#
# its second training seed (data/results-lists-matched-seed1/, heads data/heads/smollm2-135m-lists-matched-seed1-*)
# with the same line and PEAGLE_LIST_SEED=1 (WORK build/list_heads_seed1), and its wider K sweep
# (data/results-lists-matched-wide/), the same seed-0 heads on the same 48 requests, with
#
#   peagle-lab bench --suite lists -n 48 --parallel-head data/heads/smollm2-135m-lists-matched-peagle \
#     --sequential-head data/heads/smollm2-135m-lists-matched-eagle3 --ks-parallel 7,9,11 --ks-sequential 7,9,11 \
#     --max-new-tokens 96 --skip-drafting --oracle-ks none --dtype float32 --out build/wide/bench
#
# Writes WORK/{distill.jsonl, features/, peagle/, eagle3/, bench/, logs/}. Copy the heads to
# data/heads/smollm2-135m-lists-{peagle,eagle3} (config.json, model.safetensors, training.json, TRAINING.md), the
# answers to data/distill/smollm2-135m-lists.jsonl and the bench folder to data/results-lists/<host>/<dtype>/ to
# commit them (the notebooks read them there; a matched pair to the -matched- names and data/results-lists-matched/).
# Run again after an interruption: distillation and extraction resume; training restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/together.sh
source scripts/lib/pair_recipe.sh
PY=${PEAGLE_PYTHON:-.venv/bin/python}
CLI=("$PY" -m peagle_lab.cli)
OUT=${1:-build/list_heads}
BUDGET=${PEAGLE_LIST_BUDGET:-900}
N_BENCH=${PEAGLE_LIST_PROMPTS:-16}
KS=${PEAGLE_LIST_KS:-1,3,5,7}
INIT=${PEAGLE_LIST_INIT:-shipped}
STEPS=${PEAGLE_LIST_STEPS:-}
SEED=${PEAGLE_LIST_SEED:-0}
case "$INIT" in shipped|fresh) ;; *) echo "PEAGLE_LIST_INIT=$INIT: expected shipped or fresh" >&2; exit 2;; esac
mkdir -p "$OUT/logs"
T0=$(date +%s)
stamp() { echo "[list_heads] $(( $(date +%s) - T0 )) s: $*"; }

if [ -n "${PEAGLE_LIST_DISTILLED:-}" ]; then
  stamp "the target's answers to the 480 train prompts from $PEAGLE_LIST_DISTILLED"
  cmp -s "$PEAGLE_LIST_DISTILLED" "$OUT/distill.jsonl" 2>/dev/null || cp "$PEAGLE_LIST_DISTILLED" "$OUT/distill.jsonl"
else
  stamp "the target answers the 480 train prompts (greedy, up to 160 new tokens)"
  "${CLI[@]}" distill --prompts-file data/prompts/lists-train.jsonl --out "$OUT/distill.jsonl" --max-new-tokens 160 \
    --dtype float32 > "$OUT/logs/distill.log" 2>&1
  tail -1 "$OUT/logs/distill.log"
fi

stamp "features of every answer once, for both heads"
"${CLI[@]}" extract --distilled "$OUT/distill.jsonl" --split all --out "$OUT/features/part-all" --dtype float32 \
  > "$OUT/logs/extract.log" 2>&1

if [ -n "$STEPS" ]; then BUDGET_ARGS=(--steps "$STEPS"); SPENT="$STEPS optimizer steps"
else BUDGET_ARGS=(--time-budget "$BUDGET" --steps 1000000); SPENT="${BUDGET} s"; fi
train() {  # mode name shipped-head
  local start=(--init-from "data/heads/$3") what="Continuation of the shipped $3 head"
  if [ "$INIT" = fresh ]; then start=(); what="A head from seed ${SEED}'s untrained weights (the other head's start)"; fi
  pair_train "$1" "$OUT/$2" "$OUT/logs/train-$2.log" "$what on the target's answers to the 480 train list prompts \
(scripts/list_heads.sh), ${SPENT} at one thread, side by side with the other head." "${start[@]}" \
    --data "$OUT/distill.jsonl" --split all --features "$OUT/features" "${BUDGET_ARGS[@]}" --seed "$SEED"
}
stamp "train both heads side by side, ${SPENT} each at one thread, starting from: $INIT (seed $SEED)"
together peagle "train parallel peagle smollm2-135m-peagle" eagle3 "train sequential eagle3 smollm2-135m-eagle3" \
  || { rc=$?; stamp "a trainer failed (exit $rc), the other was stopped; logs in $OUT/logs/"; exit $rc; }

stamp "end to end on ${N_BENCH} held-out list prompts, both heads and their K sweeps, interleaved"
"${CLI[@]}" bench --suite lists -n "$N_BENCH" --parallel-head "$OUT/peagle" --sequential-head "$OUT/eagle3" \
  --ks-parallel "$KS" --ks-sequential "$KS" --max-new-tokens 96 --skip-drafting --oracle-ks none \
  --dtype float32 --out "$OUT/bench" --overwrite > "$OUT/logs/bench.log" 2>&1
tail -5 "$OUT/logs/bench.log"
stamp "done"
