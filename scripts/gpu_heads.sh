#!/usr/bin/env bash
# Heads worth timing for YOUR target ($PEAGLE_TARGET, default the embedded SmolLM2-135M), made on one GPU within a
# stated budget, and installed where every notebook and command looks for them (drafter.heads.head_for_target:
# $PEAGLE_RESULTS/heads/<target>/{parallel,sequential}).
#
#   PEAGLE_TARGET=Qwen/Qwen3-0.6B bash scripts/gpu_heads.sh [WORK]   # WORK default: build/gpu_heads/<target>
#   PEAGLE_GPU_DRY_RUN=1 bash scripts/gpu_heads.sh WORK             # the same steps on the CPU at tiny sizes (the tests)
#
# The budget (environment variables): PEAGLE_HEAD_PROMPTS prompts of the scale mix distilled (default 4,000 of its
# 29,638, answered in up to 384 new tokens each; `all` for every one), PEAGLE_GPU_BUDGET seconds of training per
# head (default 150). The features are streamed from bf16 shards on disk (3 taps x hidden size x 2 bytes per
# token: 3.4 KiB for a 135M target, 24 KiB for an 8B one), never all in memory.
#
# Writes WORK/{distill.jsonl, features/, peagle/, eagle3/, logs/, summary.json}, then installs the two heads. Steps:
#   1. set-up: the current environment when it has a CUDA torch (or PEAGLE_PYTHON); else a virtual environment
#      build/venv-gpu (ignored by git, like all of build/) with the project and PyPI's default (CUDA) torch;
#   2. distillation of the prompts by the target itself, bf16 (vLLM when installed, else transformers);
#   3. offline features once (bf16 taps), shared by both heads;
#   4. both heads trained at the same time, each on its own GPU when there are two or more (CUDA_VISIBLE_DEVICES),
#      else one after the other on the one GPU (two trainers sharing a GPU would each record about half its
#      tokens/s); bf16 autocast, streamed shards, a fixed time budget each. If one trainer fails, the other is
#      stopped (no orphan);
#   5. evaluation on HumanEval and on the held-out split, written into each head's TRAINING.md;
#   6. each head copied into $PEAGLE_RESULTS/heads/<target>/<kind> (beside it first, then renamed: a half-copied
#      head is never found there).
# Run again after an interruption: distillation and extraction resume where they stopped; training restarts.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/together.sh
TARGET=${PEAGLE_TARGET:-}
TGT=(); [ -n "$TARGET" ] && TGT=(--target "$TARGET")

if [ "${PEAGLE_GPU_DRY_RUN:-0}" = 1 ]; then
  DEVICE=cpu; PROMPTS=6; MAX_NEW=12; BATCH=6; BUDGET=4; STEP_TOKENS=256; ROW_TOKENS=256
  EVAL_HE=1; EVAL_VAL=1; EVAL_NEW=8; KS=1,3
  PY=${PEAGLE_PYTHON:-python}
else
  DEVICE=cuda; PROMPTS=${PEAGLE_HEAD_PROMPTS:-4000}; MAX_NEW=384; BATCH=256; BUDGET=${PEAGLE_GPU_BUDGET:-150}; STEP_TOKENS=16384
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
COMMON=(--device "$DEVICE" --dtype bfloat16 "${TGT[@]}")
PROMPT_ARGS=(); [ "$PROMPTS" = all ] || PROMPT_ARGS=(--prompts "$PROMPTS")
HEADS=$("$PY" -c "import sys; from peagle_lab.drafter.heads import trained_head_dir; print(trained_head_dir(sys.argv[1] or None, 'parallel').parent)" "$TARGET")
OUT=${1:-build/gpu_heads/$(basename "$HEADS")}
mkdir -p "$OUT/logs"
T0=$(date +%s)
stamp() { echo "[gpu_heads] $(( $(date +%s) - T0 )) s: $*"; }

if [ -z "$TARGET" ]; then
  stamp "prepare the embedded target"
  "${CLI[@]}" prepare > "$OUT/logs/prepare.log" 2>&1
fi

stamp "distil ${PROMPTS} prompts of the scale mix"
"${CLI[@]}" distill --prompts-file data/prompts/scale.jsonl "${PROMPT_ARGS[@]}" --out "$OUT/distill.jsonl" \
  --max-new-tokens "$MAX_NEW" --batch-size "$BATCH" "${COMMON[@]}" > "$OUT/logs/distill.log" 2>&1
tail -1 "$OUT/logs/distill.log"

stamp "extract features of the train split once, for both heads"
"${CLI[@]}" extract --distilled "$OUT/distill.jsonl" --split train --out "$OUT/features/part-train" \
  "${COMMON[@]}" > "$OUT/logs/extract.log" 2>&1

train() {  # mode name extra...
  local mode=$1 name=$2; shift 2
  "${CLI[@]}" train --mode "$mode" --data "$OUT/distill.jsonl" --features "$OUT/features" --out "$OUT/$name" \
    --time-budget "$BUDGET" --steps 1000000 --draft-vocab-size 8192 --batch-tokens "$STEP_TOKENS" --row-tokens "$ROW_TOKENS" \
    --stream --autocast bfloat16 --snapshot-every-tokens 500000 --eval-prompts "$EVAL_HE" --eval-val-prompts "$EVAL_VAL" \
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
stamp "install the heads where head_for_target finds them"
"$PY" - "$OUT" "$HEADS" <<'EOF'
import os, shutil, sys, tempfile
from pathlib import Path
out, heads = Path(sys.argv[1]), Path(sys.argv[2])
heads.mkdir(parents=True, exist_ok=True)
for name, kind in (("peagle", "parallel"), ("eagle3", "sequential")):
    staging = Path(tempfile.mkdtemp(prefix=f".{kind}.", dir=heads))
    shutil.copytree(out / name, staging / kind, ignore=shutil.ignore_patterns("checkpoint"))
    if (heads / kind).exists():
        shutil.rmtree(heads / kind)
    os.replace(staging / kind, heads / kind)
    shutil.rmtree(staging)
EOF
stamp "done: heads in $HEADS/parallel and $HEADS/sequential (work files in $OUT)"
