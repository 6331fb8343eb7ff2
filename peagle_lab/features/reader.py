"""Readers of a feature directory for training: :class:`FeatureDataset` (random access), :func:`iter_shards` (one
list of per-sequence dicts per shard), :func:`load_features` (everything as one list), :func:`shard_ids` (a shard's
token ids without its taps) and :func:`sequence_key` (how a cache of parts finds a sequence)."""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Iterator


import torch

from ..errors import PeagleError
from .format import read_manifest


def sequence_key(ids) -> str:
    """The key of a token-id sequence in a cache of feature parts: the SHA-256 of its ids as int32."""
    return hashlib.sha256(torch.as_tensor(ids, dtype=torch.int32).numpy().tobytes()).hexdigest()


@contextlib.contextmanager
def reading_shard(path):
    """Around the read of a feature shard: a missing, truncated or damaged one (OSError, SafetensorError, a tensor
    missing) is one error naming it and how to rebuild it."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError, KeyError, RuntimeError) as exc:
        what = "is missing" if isinstance(exc, FileNotFoundError) else "is truncated or damaged"
        detail = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        raise PeagleError(f"The feature shard {path} {what} ({detail}). "
                          f"Fix: run the same `peagle-lab extract ... --out {Path(path).parent}` again: it rewrites "
                          "missing and truncated shards and keeps the others.") from None


def shard_ids(path) -> list[torch.Tensor]:
    """The token ids of every sequence of a shard, read without its taps."""
    from safetensors import safe_open

    with reading_shard(path), safe_open(str(path), framework="pt") as f:
        offsets, ids = f.get_tensor("offsets").tolist(), f.get_tensor("input_ids")
    return [ids[a:b] for a, b in zip(offsets[:-1], offsets[1:])]


def _complete_manifest(out_dir, allow_incomplete: bool) -> dict:
    manifest = read_manifest(out_dir)
    if not manifest["complete"] and not allow_incomplete:
        n_shards = -(-manifest["num_sequences"] // manifest["shard_size"])
        raise PeagleError(f"{out_dir} is incomplete ({len(manifest['shards'])} of {n_shards} shards): the extraction "
                          f"was interrupted. Fix: run extract_features again with the same arguments to resume it "
                          f"(or pass allow_incomplete=True to read the complete shards only).")
    return manifest


def _split(tensors: dict, offsets: torch.Tensor, taps_dtype) -> list[dict]:
    out = []
    for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        rec = {k: v[a:b] for k, v in tensors.items()}
        rec["input_ids"] = rec["input_ids"].long()
        rec["greedy_next"] = rec["greedy_next"].long()
        if "topk_indices" in rec:
            rec["topk_indices"] = rec["topk_indices"].long()
        if taps_dtype is not None:
            rec["taps"] = rec["taps"].to(taps_dtype)
        out.append(rec)
    return out


def _load_shard(path: Path) -> tuple[dict, torch.Tensor]:
    from safetensors.torch import load_file

    with reading_shard(path):
        tensors = load_file(str(path))
        return tensors, tensors.pop("offsets")


def iter_shards(out_dir, taps_dtype=None, allow_incomplete: bool = False) -> Iterator[list[dict]]:
    """Yield each shard of a feature directory as a list of per-sequence dicts.

    Each dict has ``input_ids`` (T,) int64, ``taps`` (T, 3H) in the stored dtype (or ``taps_dtype``),
    ``greedy_next`` (T,) int64 and, when extracted with top-k, ``topk_values`` (T, k) float32 and
    ``topk_indices`` (T, k) int64.
    """
    out_dir = Path(out_dir)
    for entry in _complete_manifest(out_dir, allow_incomplete)["shards"]:
        tensors, offsets = _load_shard(out_dir / entry["file"])
        yield _split(tensors, offsets, taps_dtype)


def load_features(out_dir, taps_dtype=None, allow_incomplete: bool = False) -> list[dict]:
    """All sequences of a feature directory as one list of dicts (see :func:`iter_shards`)."""
    return [rec for shard in iter_shards(out_dir, taps_dtype, allow_incomplete) for rec in shard]


class FeatureDataset:
    """Random access to a feature directory: ``ds[i]`` is the dict of sequence ``i`` (see :func:`iter_shards`).

    Works as a ``torch.utils.data.Dataset`` (``len`` and ``__getitem__``); it keeps the last shard it read in
    memory, so iterate in order (or shuffle within a shard) to read each shard once.
    """

    def __init__(self, out_dir, taps_dtype=None, allow_incomplete: bool = False):
        self.out_dir = Path(out_dir)
        self.manifest = _complete_manifest(self.out_dir, allow_incomplete)
        self.taps_dtype = taps_dtype
        self._index = [(e, j) for e in self.manifest["shards"] for j in range(e["num_sequences"])]
        self._cached: tuple[int, list[dict]] | None = None

    @property
    def tap_layers(self) -> list[int]:
        return self.manifest["tap_layers"]

    def __len__(self) -> int:
        return len(self._index)

    def __getitem__(self, i: int) -> dict:
        entry, j = self._index[i]
        if self._cached is None or self._cached[0] != entry["index"]:
            tensors, offsets = _load_shard(self.out_dir / entry["file"])
            self._cached = (entry["index"], _split(tensors, offsets, self.taps_dtype))
        return self._cached[1][j]

    def __iter__(self):
        return (self[i] for i in range(len(self)))
