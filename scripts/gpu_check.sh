#!/usr/bin/env bash
# The GPU check: on a machine with one CUDA GPU and no network, in under 8 minutes, with only torch, transformers,
# accelerate, pytest, matplotlib and tokenizers installed (no Jupyter, no vLLM, no SmolLM2 weights, no data/heads):
# builds a tiny target, runs the unit tests that apply, the speculative loop on CUDA (fp32 and bf16, near-tie rule),
# the notebooks' loads with Llama-3.1-8B's shapes under a 24 GiB cap, every notebook's source cell by cell against
# the tiny target (checked cells compared with the saved outputs), and times drafting and verification on a random
# target and head of Llama-3.1-8B's shapes in bf16 (peagle_lab/tools/gpu_check.py says what each stage does).
#
#   bash scripts/gpu_check.sh                 # results in $OUT, else build/gpu-check/<host>/
#   bash scripts/gpu_check.sh --dry-run       # the same stages on the CPU at tiny sizes (the test suite runs this)
#   bash scripts/gpu_check.sh --stages env,loop,timing
#
# Every stage runs in its own process with a time limit; a failed stage is recorded and the next one runs.
# Exit 0 when every stage passed. Commit a GPU run's folder under data/results/<gpu host>/gpu-check/.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PEAGLE_PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# The whole run is bounded: 470 s on a GPU (the stages' own limits add up to 450 s); a dry run gets 4x (slow CPUs)
LIMIT=470
for a in "$@"; do [ "$a" = --dry-run ] && LIMIT=1880; done
[ "${PEAGLE_GPU_DRY_RUN:-0}" = 1 ] && LIMIT=1880
exec timeout --kill-after=10 "$LIMIT" "$PY" -m peagle_lab.tools.gpu_check "$@"
