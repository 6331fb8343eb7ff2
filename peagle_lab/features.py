"""EAGLE-3 training features: the target's tapped hidden states, offline (sharded safetensors) or online.

For every sequence of token ids, one target forward gives, per position ``t``:

- ``input_ids[t]``            the token (stored int32),
- ``taps[t]``                 the three tapped residual streams concatenated, shape ``(3 * H,)``
                              (tap ``i`` = the stream ENTERING layer ``i``, vLLM's convention, see :mod:`.taps`),
- ``greedy_next[t]``          the target's greedy prediction for token ``t + 1`` (argmax of its logits at ``t``),
- ``topk_values/indices[t]``  optionally the target's top-k logits (float32 values, int32 ids).

Offline, :func:`extract_features` streams these to a directory of shards (``shard-00000.safetensors``, ...) plus a
``manifest.json``. Taps are stored in **bfloat16 by default** (half the disk of float32; the drafter's ``fc``
reads them through a matmul that tolerates bf16 rounding); pass ``taps_dtype=torch.float32`` for exact copies.
Writes are atomic (temporary name, then ``os.replace``), so a run killed at any moment can be restarted with the
same arguments: complete shards are skipped, a half-written one is never taken for complete.

Online, :func:`online_features` yields the same per-sequence dicts straight from the target: zero disk, one
target forward per sequence per epoch. :func:`disk_cost_table` puts numbers on that trade-off.

Readers for training: :class:`FeatureDataset` (random access), :func:`iter_shards` (one list of dicts per shard),
:func:`load_features` (everything as one list).

This module is the public face of the feature modules and the ``peagle-lab extract`` command; each concept lives
in one module of its own, and every name below is the one defined there (no copies):

- :mod:`.feature_format`  the on-disk format (names, keys, dtypes, the manifest),
- :mod:`.feature_cost`    the disk arithmetic (bytes per token, estimates, the cost table),
- :mod:`.feature_online`  the features of one sequence from the target (online extraction),
- :mod:`.feature_writer`  offline extraction to resumable shards,
- :mod:`.feature_reader`  the readers.
"""

from __future__ import annotations

from .data import MAX_SEQ_LEN, load_distilled, select_split
from .feature_cost import (COST_DATASETS, COST_MODELS, bytes_per_token, disk_cost_table, estimate_bytes,
                           format_bytes, format_cost_table)
from .feature_format import (FORMAT, FORMAT_VERSION, ID_BYTES, MANIFEST, PARTIAL_SUFFIX, PER_TOKEN_KEYS,
                             TAP_CONVENTION, TAPS_DTYPES, dtype_bytes, dtype_name, read_manifest, shard_name)
from .feature_online import online_features, sequence_features
from .feature_reader import FeatureDataset, iter_shards, load_features
from .feature_writer import ExtractionResult, extract_features
from .prompts import chat_ids, load_train_prompts
from .target_args import add_target_options, load_cli_target

__all__ = ["COST_DATASETS", "COST_MODELS", "FORMAT", "FORMAT_VERSION", "ID_BYTES", "MANIFEST", "PARTIAL_SUFFIX",
           "PER_TOKEN_KEYS", "TAP_CONVENTION", "TAPS_DTYPES", "ExtractionResult", "FeatureDataset", "bytes_per_token",
           "disk_cost_table", "dtype_bytes", "dtype_name", "estimate_bytes", "extract_features", "format_bytes",
           "format_cost_table", "iter_shards", "load_features", "online_features", "read_manifest", "register_cli",
           "sequence_features", "shard_name"]


# --------------------------------------------------------------------------------------------------------------
# CLI: peagle-lab extract
# --------------------------------------------------------------------------------------------------------------

def register_cli(sub):
    p = sub.add_parser("extract", help="offline EAGLE-3 features (taps, greedy labels) to resumable shards")
    p.add_argument("--out", required=True, help="output directory (resumed when it holds an interrupted run)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--distilled", default=None,
                     help="JSONL written by `peagle-lab distill` (prompt + target response); default: training "
                          "prompts only, chat-templated")
    src.add_argument("--prompts", type=int, default=None, help="use the first N training prompts (default: all)")
    p.add_argument("--split", choices=["train", "val", "all"], default="all",
                   help="with --distilled: the prompts of this split of the scale mix (default all)")
    p.add_argument("--taps", default=None, help="tap layer ids, e.g. 2,15,27 (default: vLLM's 2, L//2, L-3)")
    p.add_argument("--shard-size", type=int, default=64, help="sequences per shard (default 64)")
    p.add_argument("--store-dtype", default="bfloat16", choices=sorted(TAPS_DTYPES), help="taps dtype on disk")
    p.add_argument("--topk", type=int, default=0, help="also store the target's top-k logits (default 0)")
    add_target_options(p)
    p.set_defaults(func=_run_cli)


def _run_cli(args):
    model, tok, target = load_cli_target(args)
    if args.distilled:
        records, _ = select_split(load_distilled(args.distilled), args.split)
        sequences = [r["input_ids"][:MAX_SEQ_LEN] for r in records]  # as the trainer cuts them: it finds them
    else:
        sequences = [chat_ids(tok, p) for p in load_train_prompts(args.prompts)]
    taps = [int(t) for t in args.taps.split(",")] if args.taps else None
    extract_features(model, sequences, args.out, tap_layers=taps, shard_size=args.shard_size,
                     taps_dtype=TAPS_DTYPES[args.store_dtype], topk=args.topk, target=target)
