#!/usr/bin/env bash
# Distil, train and evaluate both heads of the embedded target on CUDA, inside about 10 minutes of an H200.
#
#   bash scripts/gpu_heads.sh [OUT]          # OUT default: build/gpu_heads
#   PEAGLE_GPU_DRY_RUN=1 bash scripts/gpu_heads.sh OUT   # the same steps on the CPU at tiny sizes (the test suite)
#
# Writes OUT/{distill.jsonl, features/, peagle/, eagle3/, logs/, summary.json}. Steps, in order:
#   1. set-up: the current environment when it has a CUDA torch (or PEAGLE_PYTHON); else a virtual environment
#      build/venv-gpu (ignored by git, like all of build/) with the project and PyPI's default (CUDA) torch;
#   2. distillation of the whole scale prompt mix (5,073 prompts, up to 384 new tokens each: ~1.5-2M tokens), bf16;
#   3. offline features once (bf16 taps), shared by both heads;
#   4. both heads trained at the same time, each on its own GPU when there are two or more (CUDA_VISIBLE_DEVICES),
#      else one after the other on the one GPU (two trainers sharing a GPU would each record about half its
#      tokens/s); bf16 autocast, a fixed time budget each. If one trainer fails, the other is stopped (no orphan);
#   5. evaluation on HumanEval and on the held-out split, written into each head's TRAINING.md.
# Run again after an interruption: distillation and extraction resume where they stopped; training restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/together.sh
OUT=${1:-build/gpu_heads}
mkdir -p "$OUT/logs"

if [ "${PEAGLE_GPU_DRY_RUN:-0}" = 1 ]; then
  DEVICE=cpu; PROMPTS=(--prompts 6); MAX_NEW=12; BATCH=6; BUDGET=4; STEP_TOKENS=256; ROW_TOKENS=256
  EVAL_HE=1; EVAL_VAL=1; EVAL_NEW=8; KS=1,3
  PY=${PEAGLE_PYTHON:-python}
else
  DEVICE=cuda; PROMPTS=(); MAX_NEW=384; BATCH=256; BUDGET=${PEAGLE_GPU_BUDGET:-150}; STEP_TOKENS=16384
  ROW_TOKENS=4096; EVAL_HE=10; EVAL_VAL=20; EVAL_NEW=96; KS=1,3,5,7
  if [ -n "${PEAGLE_PYTHON:-}" ]; then
    PY=$PEAGLE_PYTHON
  elif python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null \
       && python3 -c "import peagle_lab" 2>/dev/null; then
    PY=python3   # the environment this runs in already has a CUDA torch and the project (conda, make setup)
  else
    [ -x build/venv-gpu/bin/python ] || python3 -m venv build/venv-gpu
    build/venv-gpu/bin/pip install -q -e ".[lab]" 2>&1 | tail -2   # PyPI's default torch wheel is the CUDA build
    PY=build/venv-gpu/bin/python
  fi
  "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: use PEAGLE_GPU_DRY_RUN=1 on a CPU')"
fi
CLI=("$PY" -m peagle_lab.cli)
COMMON=(--device "$DEVICE" --dtype bfloat16)
T0=$(date +%s)
stamp() { echo "[gpu_heads] $(( $(date +%s) - T0 )) s: $*"; }

stamp "prepare the embedded target"
"${CLI[@]}" prepare > "$OUT/logs/prepare.log" 2>&1

stamp "distil the scale mix"
"${CLI[@]}" distill --prompts-file data/prompts/scale.jsonl "${PROMPTS[@]}" --out "$OUT/distill.jsonl" \
  --max-new-tokens "$MAX_NEW" --batch-size "$BATCH" "${COMMON[@]}" > "$OUT/logs/distill.log" 2>&1
tail -1 "$OUT/logs/distill.log"

stamp "extract features of the train split once, for both heads"
"${CLI[@]}" extract --distilled "$OUT/distill.jsonl" --split train --out "$OUT/features/part-train" \
  "${COMMON[@]}" > "$OUT/logs/extract.log" 2>&1

train() {  # mode name extra...
  local mode=$1 name=$2; shift 2
  "${CLI[@]}" train --mode "$mode" --data "$OUT/distill.jsonl" --features "$OUT/features" --out "$OUT/$name" \
    --time-budget "$BUDGET" --steps 1000000 --draft-vocab-size 8192 --batch-tokens "$STEP_TOKENS" --row-tokens "$ROW_TOKENS" \
    --autocast bfloat16 --snapshot-every-tokens 500000 --eval-prompts "$EVAL_HE" --eval-val-prompts "$EVAL_VAL" \
    --eval-max-new-tokens "$EVAL_NEW" --eval-ks "$KS" --overwrite "${COMMON[@]}" "$@" \
    > "$OUT/logs/train-$name.log" 2>&1
}
GPUS=$([ "$DEVICE" = cuda ] && "$PY" -c "import torch; print(torch.cuda.device_count())" || echo 0)
if [ "$GPUS" -ge 2 ] || [ "$DEVICE" = cpu ]; then
  stamp "train both heads side by side (${BUDGET} s each$([ "$GPUS" -ge 2 ] && echo ', one GPU each'))"
  G1=; G2=; [ "$GPUS" -ge 2 ] && { G1="CUDA_VISIBLE_DEVICES=0"; G2="CUDA_VISIBLE_DEVICES=1"; }
  together peagle "$G1 train parallel peagle -K 8" eagle3 "$G2 train sequential eagle3 -K 4" \
    || { rc=$?; stamp "a trainer failed (exit $rc), the other was stopped; logs in $OUT/logs/"; exit $rc; }
else
  stamp "train both heads one after the other on the one GPU (${BUDGET} s each)"
  train parallel peagle -K 8
  train sequential eagle3 -K 4
fi

stamp "summary"
"$PY" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = {}
for name in ("peagle", "eagle3"):
    rec = json.loads((out / name / "training.json").read_text())
    summary[name] = dict(tokens_seen=rec["tokens_seen"], tokens_per_s=rec["tokens_per_s"], steps=rec["steps_done"],
                         autocast=rec["autocast"], host=rec["machine"]["host"],
                         humaneval=rec["eval"]["acceptance_length"], held_out=rec["eval_val"]["acceptance_length"])
    print(name, json.dumps(summary[name]))
(out / "summary.json").write_text(json.dumps(summary, indent=1))
EOF
stamp "done: heads in $OUT/peagle and $OUT/eagle3"
