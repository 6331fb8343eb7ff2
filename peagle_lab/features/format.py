"""The on-disk format of offline EAGLE-3 features: names, per-token keys, taps dtypes and the manifest.

A feature directory holds ``shard-00000.safetensors``, ... (each a run of whole sequences, the per-token tensors
concatenated plus an ``offsets`` table) and ``manifest.json`` (the settings and the complete shards). The writer
is :mod:`.writer`, the readers :mod:`.reader`, the disk arithmetic :mod:`.cost`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import PeagleError
from ..precision import dtype_name

FORMAT = "peagle-lab-features"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TAP_CONVENTION = "tap i = residual stream entering decoder layer i (vLLM) = transformers hidden_states[i]"
PER_TOKEN_KEYS = ("input_ids", "taps", "greedy_next", "topk_values", "topk_indices")
ID_BYTES = 4  # input_ids and greedy_next are stored as int32

TAPS_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def taps_dtype_name(dtype) -> str:
    """``torch.bfloat16`` or ``"bfloat16"`` -> ``"bfloat16"``, one of :data:`TAPS_DTYPES` (raises with the fix for
    another dtype)."""
    name = dtype_name(dtype)
    if name in TAPS_DTYPES:
        return name
    raise PeagleError(f"Unsupported taps dtype {dtype!r}. Fix: use one of {sorted(TAPS_DTYPES)} "
                      "(bfloat16 halves disk).")


def dtype_bytes(dtype) -> int:
    return TAPS_DTYPES[taps_dtype_name(dtype)].itemsize


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.safetensors"


def read_manifest(out_dir) -> dict:
    """The manifest of a feature directory (raises with the fix when it is not one)."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        raise PeagleError(f"{out_dir} has no {MANIFEST}: it is not a feature directory written by "
                          f"extract_features. Fix: run extract_features(model, sequences, '{out_dir}') first.")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise PeagleError(f"{path} is not a {FORMAT} v{FORMAT_VERSION} manifest. Fix: re-extract into a new directory.")
    return manifest
