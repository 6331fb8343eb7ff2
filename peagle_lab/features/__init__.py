"""EAGLE-3 training features: the target's tapped hidden states, offline (sharded safetensors) or online.

For every sequence of token ids, one target forward gives, per position ``t``:

- ``input_ids[t]``            the token (stored int32),
- ``taps[t]``                 the three tapped residual streams concatenated, shape ``(3 * H,)``
                              (tap ``i`` = the stream ENTERING layer ``i``, vLLM's convention, see :mod:`.taps`),
- ``greedy_next[t]``          the target's greedy prediction for token ``t + 1`` (argmax of its logits at ``t``),
- ``topk_values/indices[t]``  optionally the target's top-k logits (float32 values, int32 ids).

Offline, :func:`extract_features` streams these to a directory of shards (``shard-00000.safetensors``, ...) plus a
``manifest.json``. Taps are stored in **bfloat16 by default** (half the disk of float32; the drafter's ``fc``
reads them through a matmul that tolerates bf16 rounding); pass ``ExtractionSettings(taps_dtype=torch.float32)``
for exact copies. Writes are atomic (temporary name, then ``os.replace``), so a run killed at any moment can be
restarted with the same arguments: complete shards are skipped, a half-written one is never taken for complete.

Online, :func:`online_features` yields the same per-sequence dicts straight from the target: zero disk, one
target forward per sequence per epoch. :func:`disk_cost_table` puts numbers on that trade-off.

Readers for training: :class:`FeatureDataset` (random access), :func:`iter_shards` (one list of dicts per shard),
:func:`load_features` (everything as one list).

This package's ``__init__`` is the public face of the feature modules; each concept lives in one module of its own,
and every name below is the one defined there (no copies):

- :mod:`.format`         the on-disk format (names, keys, dtypes, the manifest),
- :mod:`.cost`           the disk arithmetic (bytes per token, estimates, the cost table),
- :mod:`.online`         the features of one sequence from the target (online extraction),
- :mod:`.writer`         offline extraction to resumable shards,
- :mod:`.reader`         the readers,
- :mod:`.taps`           the tapped layers (vLLM's convention),
- :mod:`.identity`       which target a file was made with.

The ``peagle-lab extract`` command is :mod:`peagle_lab.cli.extract`.
"""

from __future__ import annotations

from .cost import (COST_DATASETS, COST_MODELS, bytes_per_token, disk_cost_table, estimate_bytes,
                   format_bytes, format_cost_table)
from .format import (FORMAT, FORMAT_VERSION, ID_BYTES, MANIFEST, PER_TOKEN_KEYS, TAP_CONVENTION, TAPS_DTYPES,
                     dtype_bytes, read_manifest, shard_name, taps_dtype_name)
from .online import batch_features, length_batches, online_features, sequence_features
from .reader import FeatureDataset, iter_shards, load_features
from .writer import ExtractionResult, ExtractionSettings, extract_features

__all__ = ["COST_DATASETS", "COST_MODELS", "FORMAT", "FORMAT_VERSION", "ID_BYTES", "MANIFEST",
           "PER_TOKEN_KEYS", "TAP_CONVENTION", "TAPS_DTYPES", "ExtractionResult", "ExtractionSettings",
           "FeatureDataset", "batch_features", "bytes_per_token",
           "length_batches",
           "disk_cost_table", "dtype_bytes", "estimate_bytes", "extract_features", "format_bytes",
           "format_cost_table", "iter_shards", "load_features", "online_features", "read_manifest",
           "sequence_features", "shard_name", "taps_dtype_name"]
