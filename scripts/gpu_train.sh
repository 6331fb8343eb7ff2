#!/usr/bin/env bash
# Train a 4-layer P-EAGLE head and a 1-layer EAGLE-3 head on a GPU machine with no network that takes at most
# 64 MiB per run and returns at most 8 files of 16 MiB (peagle_lab/cli/gpu_train.py says what each step does).
#
#   bash scripts/gpu_train.sh carry-target          # here: build/gpu-carry/{1,2}: the GGUF in two checksummed parts
#                                                   #       (the gguf wheel beside part 1)
#   bash scripts/gpu_train.sh check                 # GPU, run 1 (carry build/gpu-carry/1): part 1 arrived intact
#   bash scripts/gpu_train.sh run [--budget S]      # GPU, run 2 (carry build/gpu-carry/2): parts joined and checked,
#                                                   #       target converted, both heads trained S s each (default
#                                                   #       60), heads and records written to $OUT
#   bash scripts/gpu_train.sh unpack --from DIR     # here: the returned files into build/gpu-heads/{peagle,eagle3}
#   bash scripts/gpu_train.sh --dry-run             # every step on the CPU at tiny sizes (the test suite runs it)
#
# Flags `run` does not know go to both `peagle-lab train` commands (e.g. --lr 1e-3 --epochs 5).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PEAGLE_PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "${1:-}" = --dry-run ]; then
  shift
  exec "$PY" -m peagle_lab.cli.gpu_train dry-run "$@"
fi
exec "$PY" -m peagle_lab.cli.gpu_train "$@"
