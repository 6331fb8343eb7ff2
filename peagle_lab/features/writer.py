"""Offline extraction: :func:`extract_features` streams the features of a set of sequences to a directory of
safetensors shards plus a ``manifest.json`` (the format: :mod:`.format`).

Taps are stored in **bfloat16 by default** (half the disk of float32; the drafter's ``fc`` reads them through a
matmul that tolerates bf16 rounding); pass ``taps_dtype=torch.float32`` for exact copies. Every file is written
atomically (:mod:`.atomic`), so a run killed at any moment can be restarted with the same arguments: complete
shards are skipped, a half-written one is never taken for complete.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch

from .. import lock
from ..atomic import atomic_write, write_json
from ..errors import PeagleError
from .cost import bytes_per_token, estimate_bytes, format_bytes
from .format import (FORMAT, FORMAT_VERSION, MANIFEST, PER_TOKEN_KEYS, TAP_CONVENTION,
                     dtype_bytes, read_manifest, shard_name, taps_dtype_name)
from .online import batch_features, length_batches
from .identity import target_fingerprint, target_identity
from ..settings import display_path
from .taps import check_tap_layers, default_tap_layers
from ..timer import Timer

# Settings that must match when a run is resumed in an existing directory.
_RESUME_KEYS = ("num_layers", "hidden_size", "vocab_size", "tap_layers", "taps_dtype", "topk", "shard_size",
                "num_sequences", "num_tokens", "prompts_sha256", "target_fingerprint")


@dataclass
class ExtractionResult:
    out_dir: Path
    manifest: dict
    num_tokens: int
    estimate_bytes: int
    bytes_on_disk: int
    shards_written: int
    shards_skipped: int
    seconds: float  # wall time of the shards computed in this call
    tokens_computed: int  # tokens computed in this call (skipped shards excluded)
    tokens_per_s: float = field(init=False)

    def __post_init__(self):
        self.tokens_per_s = self.tokens_computed / self.seconds if self.seconds > 0 else float("nan")


def _validate_sequences(sequences, vocab_size: int, max_positions: int | None) -> list[torch.Tensor]:
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if not seqs:
        raise PeagleError("The prompt set is empty: nothing to extract. Fix: pass at least one sequence of token ids.")
    for i, s in enumerate(seqs):
        if s.numel() == 0:
            raise PeagleError(f"Sequence {i} is empty. Fix: drop empty prompts before extraction.")
        if int(s.min()) < 0 or int(s.max()) >= vocab_size:
            raise PeagleError(f"Sequence {i} has token ids outside [0, {vocab_size}): it was tokenized for a "
                              f"different model. Fix: tokenize with the target's own tokenizer.")
        if max_positions and s.numel() > max_positions:
            raise PeagleError(f"Sequence {i} has {s.numel()} tokens, more than the target's "
                              f"max_position_embeddings={max_positions}. Fix: truncate it (or split it) first.")
    return seqs


def _prompts_sha256(seqs: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for s in seqs:
        h.update(len(s).to_bytes(8, "little"))
        h.update(s.to(torch.int32).numpy().tobytes())
    return h.hexdigest()


def _save_shard(records: list[dict], path: Path, metadata: dict) -> None:
    from safetensors.torch import save_file

    lengths = torch.tensor([len(r["input_ids"]) for r in records], dtype=torch.int64)
    tensors = {"offsets": torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])}
    for key in PER_TOKEN_KEYS:
        if key in records[0]:
            tensors[key] = torch.cat([r[key] for r in records]).contiguous()
    try:
        # One metadata key: safetensors writes several in a random order, and shards must be byte-reproducible.
        header = {FORMAT: json.dumps(metadata, sort_keys=True)}
        atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=header))
    except (PeagleError, RuntimeError) as e:  # safetensors reports a failed write as either OSError or RuntimeError
        raise PeagleError(f"Could not write {path.name} in {path.parent} ({e}): the disk may be full. Fix: free "
                          "space, then run the same extraction again: the complete shards are kept, this one is "
                          "redone.") from e


def _shard_is_complete(out_dir: Path, entry: dict) -> bool:
    path = out_dir / entry["file"]
    return path.is_file() and path.stat().st_size == entry["bytes"]


def extract_features(model, sequences: Sequence, out_dir, tap_layers=None, shard_size: int = 64,
                     taps_dtype=torch.bfloat16, topk: int = 0, target: str | None = None, progress: bool = True,
                     on_shard: Callable[[int, Path], None] | None = None, verbose: bool = True,
                     batch_tokens: int = 0) -> ExtractionResult:
    """Extract features of ``sequences`` (token ids) into ``out_dir`` as shards of ``shard_size`` sequences.

    Prints the disk estimate before starting and the real size after. Resumable: call again with the same
    arguments after an interruption and the complete shards are kept; a directory holding features made with
    other settings (taps, dtype, top-k, shard size, prompts or target) is refused. ``on_shard(index, path)`` runs
    after each shard is safely on disk. Taps default to bfloat16 on disk (half of float32). One writer per
    directory: the directory is locked for the run (:mod:`peagle_lab.lock`), a second run is refused.

    ``batch_tokens`` > 0: several sequences of a shard per target forward (:func:`.online.length_batches`:
    similar lengths together, at most ``batch_tokens`` padded tokens per forward); 0: one sequence per forward.
    The features are the same up to the rounding of differently shaped products (a shard's sequences keep their
    order), so it is not a setting a resumed run must repeat.
    """
    with lock.hold(out_dir):
        return _extract(model, sequences, Path(out_dir), tap_layers, shard_size, taps_dtype, topk, target, progress,
                        on_shard, verbose, batch_tokens)


def _extract(model, sequences, out_dir: Path, tap_layers, shard_size, taps_dtype, topk, target, progress, on_shard,
             verbose, batch_tokens: int = 0) -> ExtractionResult:
    from tqdm.auto import tqdm

    cfg = model.config
    num_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(num_layers), num_layers)
    if batch_tokens < 0:
        raise PeagleError(f"batch_tokens must be >= 0 (0: one sequence per forward), got {batch_tokens}.")
    if shard_size < 1:
        raise PeagleError(f"shard_size must be >= 1, got {shard_size}.")
    if topk < 0 or topk > cfg.vocab_size:
        raise PeagleError(f"topk must be in [0, vocab_size={cfg.vocab_size}], got {topk}.")
    seqs = _validate_sequences(sequences, cfg.vocab_size, getattr(cfg, "max_position_embeddings", None))
    num_tokens = sum(len(s) for s in seqs)
    out_dir = Path(out_dir)
    settings = dict(
        format=FORMAT, version=FORMAT_VERSION,
        target=target or Path(str(getattr(cfg, "_name_or_path", "") or "unknown")).name,
        target_fingerprint=target_fingerprint(model), target_identity=target_identity(model),
        num_layers=num_layers, hidden_size=hidden, vocab_size=cfg.vocab_size,
        tap_layers=list(tap_layers), tap_convention=TAP_CONVENTION,
        taps_dtype=taps_dtype_name(taps_dtype), topk=topk, shard_size=shard_size,
        num_sequences=len(seqs), num_tokens=num_tokens, prompts_sha256=_prompts_sha256(seqs),
        keys=[k for k in PER_TOKEN_KEYS if topk or not k.startswith("topk")],
        bytes_per_token=bytes_per_token(hidden, len(tap_layers), taps_dtype, topk),
        topk_bytes_per_token=topk * 8,  # float32 value + int32 id per kept logit
        batch_tokens=batch_tokens,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    done: dict[int, dict] = {}
    if (out_dir / MANIFEST).exists():
        old = read_manifest(out_dir)
        diff = {k: (old.get(k), settings[k]) for k in _RESUME_KEYS if old.get(k) != settings[k]}
        if diff:
            lines = "\n".join(f"  {k}: existing {a!r} != requested {b!r}" for k, (a, b) in diff.items())
            raise PeagleError(f"{display_path(out_dir)} already holds features extracted with other settings:\n"
                              f"{lines}\nFix: extract into a new directory (or delete {display_path(out_dir)} to "
                              "start over).")
        done = {e["index"]: e for e in old["shards"] if _shard_is_complete(out_dir, e)}

    n_shards = (len(seqs) + shard_size - 1) // shard_size
    bounds = [(i * shard_size, min((i + 1) * shard_size, len(seqs))) for i in range(n_shards)]
    estimate = estimate_bytes(num_tokens, hidden, len(tap_layers), taps_dtype, topk)
    if verbose:
        per_tok = bytes_per_token(hidden, len(tap_layers), taps_dtype, topk)
        print(f"Extracting {len(seqs):,} sequences, {num_tokens:,} tokens, taps {list(tap_layers)} of a "
              f"{num_layers}-layer target (H={hidden}) in {n_shards} shard(s) of <= {shard_size} into {display_path(out_dir)}\n"
              f"Disk estimate: {format_bytes(estimate)} = {num_tokens:,} tokens x {per_tok:,} B/token "
              f"({len(tap_layers)} x {hidden} x {dtype_bytes(taps_dtype)} B {taps_dtype_name(taps_dtype)} taps + "
              f"int32 id + int32 greedy label" + (f" + top-{topk} logits" if topk else "") + ")"
              + (f"; resuming: {len(done)} of {n_shards} shard(s) already complete" if done else ""))

    manifest = dict(settings, complete=len(done) == n_shards, shards=[done[i] for i in sorted(done)])
    write_json(out_dir / MANIFEST, manifest, indent=1)

    skipped_tokens = sum(e["num_tokens"] for e in done.values())
    bar = tqdm(total=num_tokens, initial=skipped_tokens, unit="tok", unit_scale=True, desc="extract",
               disable=not progress)
    written, timer = 0, Timer(model.device)
    try:
        for index, (lo, hi) in enumerate(bounds):
            if index in done:
                continue
            path = out_dir / shard_name(index)
            with timer("shards"):
                chunk = seqs[lo:hi]
                records: list = [None] * len(chunk)
                groups = (length_batches([len(s) for s in chunk], batch_tokens) if batch_tokens
                          else [[i] for i in range(len(chunk))])
                for group in groups:
                    feats = batch_features(model, [chunk[i] for i in group], tap_layers, taps_dtype, topk)
                    for i, rec in zip(group, feats):
                        records[i] = rec
                    bar.update(sum(len(chunk[i]) for i in group))
                _save_shard(records, path, dict(version=FORMAT_VERSION, shard=index, first_sequence=lo))
            written += 1
            entry = dict(index=index, file=path.name, first_sequence=lo, num_sequences=hi - lo,
                         num_tokens=sum(len(r["input_ids"]) for r in records), bytes=path.stat().st_size)
            manifest["shards"] = sorted(manifest["shards"] + [entry], key=lambda e: e["index"])
            manifest["complete"] = len(manifest["shards"]) == n_shards
            write_json(out_dir / MANIFEST, manifest, indent=1)
            if on_shard is not None:
                on_shard(index, path)
    finally:
        bar.close()

    seconds = timer.totals.get("shards", 0.0)
    size = sum(e["bytes"] for e in manifest["shards"]) + (out_dir / MANIFEST).stat().st_size
    computed = num_tokens - skipped_tokens
    result = ExtractionResult(out_dir, manifest, num_tokens, estimate, size, written, len(done), seconds, computed)
    if verbose:
        speed = f", {computed:,} tokens in {seconds:.1f} s = {result.tokens_per_s:,.0f} tok/s" if written else ""
        print(f"Wrote {written} shard(s) (skipped {len(done)} complete){speed}. "
              f"On disk: {format_bytes(size)} (estimate {format_bytes(estimate)}).")
    return result
