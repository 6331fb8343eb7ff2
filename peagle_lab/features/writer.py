"""Offline extraction: :func:`extract_features` streams the features of a set of sequences to a directory of
safetensors shards plus a ``manifest.json`` (the format: :mod:`.format`).

Taps are stored in **bfloat16 by default** (half the disk of float32; the drafter's ``fc`` reads them through a
matmul that tolerates bf16 rounding); pass ``ExtractionSettings(taps_dtype=torch.float32)`` for exact copies.
Every file is written atomically (:mod:`.atomic`), so a run killed at any moment can be restarted with the same
arguments: complete shards are skipped, a half-written one is never taken for complete.
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
from ..flags import flag_field
from .cost import bytes_per_token, estimate_bytes, format_bytes
from .format import (FORMAT, FORMAT_VERSION, MANIFEST, PER_TOKEN_KEYS, TAP_CONVENTION,
                     dtype_bytes, read_manifest, shard_name, taps_dtype_name)
from .online import ordered_features
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

@dataclass(frozen=True)
class ExtractionSettings:
    """What an extraction stores: the ``tap_layers`` (default: EAGLE-3's low, middle and high layer), ``shard_size``
    sequences per shard, taps as ``taps_dtype`` on disk, the target's top-``topk`` logits (0: none), and the name
    of the ``target`` recorded in the manifest (default: the model's own). ``batch_tokens`` > 0: several sequences
    of a shard per target forward (:func:`.online.length_batches`: similar lengths together, at most
    ``batch_tokens`` padded tokens per forward; the training feature cache batches this way); 0 (the default, here
    and on the command line: bit for bit what :func:`.online.online_features` computes): one sequence per forward.
    Batched features are the same up to the rounding of differently shaped products (a shard's sequences keep
    their order), so it is not a setting a resumed run must repeat. The fields with a flag are
    ``peagle-lab extract``'s options (:func:`peagle_lab.flags.add_config_flags`): one default, one help."""

    tap_layers: tuple[int, ...] | None = flag_field(None, cli=False)  # --tap-layers: 2 15 27 or 2,15,27
    shard_size: int = flag_field(64, "sequences per shard")
    taps_dtype: torch.dtype = flag_field(torch.bfloat16, cli=False)  # --store-dtype: by name
    topk: int = flag_field(0, "also store the target's top-k logits, the soft targets of `train --loss kl` (k x 8 "
                              "bytes per token: float32 value + int32 id)", flag="--topk-logits", aliases=("--topk",))
    batch_tokens: int = flag_field(0, "padded tokens per target forward: sequences of similar length batched "
                                      "together, for GPUs (0: one sequence per forward, the features bit for bit "
                                      "those of a forward of each alone)")
    target: str | None = flag_field(None, cli=False)  # the --target option's name


def extract_features(model, sequences: Sequence, out_dir, settings: ExtractionSettings | None = None,
                     progress: bool = True, on_shard: Callable[[int, Path], None] | None = None,
                     verbose: bool = True) -> ExtractionResult:
    """Extract features of ``sequences`` (token ids) into ``out_dir`` as shards of ``settings.shard_size``
    sequences (:class:`ExtractionSettings`; its defaults when ``None``).

    Prints the disk estimate before starting and the real size after. Resumable: call again with the same
    arguments after an interruption and the complete shards are kept; a directory holding features made with
    other settings (taps, dtype, top-k, shard size, prompts or target) is refused. ``on_shard(index, path)`` runs
    after each shard is safely on disk. Taps default to bfloat16 on disk (half of float32). One writer per
    directory: the directory is locked for the run (:mod:`peagle_lab.lock`), a second run is refused.
    """
    with lock.hold(out_dir):
        return _extract(model, sequences, Path(out_dir), settings or ExtractionSettings(), progress, on_shard,
                        verbose)


@dataclass
class _Plan:
    """One extraction's resolved inputs: the checked sequences, the tap layers, the manifest's settings and the
    shards already complete in the directory (index -> manifest entry)."""

    seqs: list[torch.Tensor]
    tap_layers: tuple[int, ...]
    settings: dict
    done: dict[int, dict] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return self.settings["num_tokens"]

    def bounds(self) -> list[tuple[int, int]]:
        """``(first, end)`` sequence of each shard."""
        size, n = self.settings["shard_size"], len(self.seqs)
        return [(lo, min(lo + size, n)) for lo in range(0, n, size)]


def _extract(model, sequences, out_dir: Path, s: ExtractionSettings, progress: bool, on_shard,
             verbose: bool) -> ExtractionResult:
    plan = _plan(model, sequences, s)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan.done = _complete_shards(out_dir, plan.settings)
    estimate = estimate_bytes(plan.num_tokens, model.config.hidden_size, len(plan.tap_layers), s.taps_dtype, s.topk)
    if verbose:
        _print_plan(plan, s, out_dir, estimate)
    manifest = dict(plan.settings, complete=len(plan.done) == len(plan.bounds()),
                    shards=[plan.done[i] for i in sorted(plan.done)])
    write_json(out_dir / MANIFEST, manifest, indent=1)
    written, seconds = _write_shards(model, plan, s, out_dir, manifest, progress, on_shard)
    size = sum(e["bytes"] for e in manifest["shards"]) + (out_dir / MANIFEST).stat().st_size
    computed = plan.num_tokens - sum(e["num_tokens"] for e in plan.done.values())
    result = ExtractionResult(out_dir, manifest, plan.num_tokens, estimate, size, written, len(plan.done), seconds,
                              computed)
    if verbose:
        speed = f", {computed:,} tokens in {seconds:.1f} s = {result.tokens_per_s:,.0f} tok/s" if written else ""
        print(f"Wrote {written} shard(s) (skipped {len(plan.done)} complete){speed}. "
              f"On disk: {format_bytes(size)} (estimate {format_bytes(estimate)}).")
    return result


def _plan(model, sequences, s: ExtractionSettings) -> _Plan:
    """The settings checked against the target and the sequences checked against its vocabulary and context, and
    the manifest's record of them (what a resumed run must repeat: :data:`_RESUME_KEYS`)."""
    cfg = model.config
    num_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    tap_layers = check_tap_layers(s.tap_layers or default_tap_layers(num_layers), num_layers)
    if s.batch_tokens < 0:
        raise PeagleError(f"batch_tokens must be >= 0 (0: one sequence per forward), got {s.batch_tokens}.")
    if s.shard_size < 1:
        raise PeagleError(f"shard_size must be >= 1, got {s.shard_size}.")
    if s.topk < 0 or s.topk > cfg.vocab_size:
        raise PeagleError(f"topk must be in [0, vocab_size={cfg.vocab_size}], got {s.topk}.")
    seqs = _validate_sequences(sequences, cfg.vocab_size, getattr(cfg, "max_position_embeddings", None))
    settings = dict(
        format=FORMAT, version=FORMAT_VERSION,
        target=s.target or Path(str(getattr(cfg, "_name_or_path", "") or "unknown")).name,
        target_fingerprint=target_fingerprint(model), target_identity=target_identity(model),
        num_layers=num_layers, hidden_size=hidden, vocab_size=cfg.vocab_size,
        tap_layers=list(tap_layers), tap_convention=TAP_CONVENTION,
        taps_dtype=taps_dtype_name(s.taps_dtype), topk=s.topk, shard_size=s.shard_size,
        num_sequences=len(seqs), num_tokens=sum(len(x) for x in seqs), prompts_sha256=_prompts_sha256(seqs),
        keys=[k for k in PER_TOKEN_KEYS if s.topk or not k.startswith("topk")],
        bytes_per_token=bytes_per_token(hidden, len(tap_layers), s.taps_dtype, s.topk),
        topk_bytes_per_token=s.topk * 8,  # float32 value + int32 id per kept logit
        batch_tokens=s.batch_tokens,
    )
    return _Plan(seqs, tap_layers, settings)


def _complete_shards(out_dir: Path, settings: dict) -> dict[int, dict]:
    """The complete shards of an earlier run in ``out_dir`` (index -> manifest entry); a directory whose features
    were made with other settings is refused."""
    if not (out_dir / MANIFEST).exists():
        return {}
    old = read_manifest(out_dir)
    diff = {k: (old.get(k), settings[k]) for k in _RESUME_KEYS if old.get(k) != settings[k]}
    if diff:
        lines = "\n".join(f"  {k}: existing {a!r} != requested {b!r}" for k, (a, b) in diff.items())
        raise PeagleError(f"{display_path(out_dir)} already holds features extracted with other settings:\n"
                          f"{lines}\nFix: extract into a new directory (or delete {display_path(out_dir)} to "
                          "start over).")
    return {e["index"]: e for e in old["shards"] if _shard_is_complete(out_dir, e)}


def _print_plan(plan: _Plan, s: ExtractionSettings, out_dir: Path, estimate: int) -> None:
    st, taps, done = plan.settings, list(plan.tap_layers), plan.done
    n_shards = len(plan.bounds())
    print(f"Extracting {len(plan.seqs):,} sequences, {plan.num_tokens:,} tokens, taps {taps} of a "
          f"{st['num_layers']}-layer target (H={st['hidden_size']}) in {n_shards} shard(s) of <= {s.shard_size} "
          f"into {display_path(out_dir)}\n"
          f"Disk estimate: {format_bytes(estimate)} = {plan.num_tokens:,} tokens x {st['bytes_per_token']:,} B/token "
          f"({len(taps)} x {st['hidden_size']} x {dtype_bytes(s.taps_dtype)} B {taps_dtype_name(s.taps_dtype)} "
          f"taps + int32 id + int32 greedy label" + (f" + top-{s.topk} logits" if s.topk else "") + ")"
          + (f"; resuming: {len(done)} of {n_shards} shard(s) already complete" if done else ""))


def _write_shards(model, plan: _Plan, s: ExtractionSettings, out_dir: Path, manifest: dict, progress: bool,
                  on_shard) -> tuple[int, float]:
    """Compute and write every shard not yet complete, the manifest rewritten after each: ``(shards written,
    seconds spent on them)``."""
    from tqdm.auto import tqdm

    bounds = plan.bounds()
    bar = tqdm(total=plan.num_tokens, initial=sum(e["num_tokens"] for e in plan.done.values()), unit="tok",
               unit_scale=True, desc="extract", disable=not progress)
    written, timer = 0, Timer(model.device)
    try:
        for index, (lo, hi) in enumerate(bounds):
            if index in plan.done:
                continue
            path = out_dir / shard_name(index)
            with timer("shards"):
                records = _shard_records(model, plan.seqs[lo:hi], plan.tap_layers, s, bar)
                _save_shard(records, path, dict(version=FORMAT_VERSION, shard=index, first_sequence=lo))
            written += 1
            entry = dict(index=index, file=path.name, first_sequence=lo, num_sequences=hi - lo,
                         num_tokens=sum(len(r["input_ids"]) for r in records), bytes=path.stat().st_size)
            manifest["shards"] = sorted(manifest["shards"] + [entry], key=lambda e: e["index"])
            manifest["complete"] = len(manifest["shards"]) == len(bounds)
            write_json(out_dir / MANIFEST, manifest, indent=1)
            if on_shard is not None:
                on_shard(index, path)
    finally:
        bar.close()
    return written, timer.totals.get("shards", 0.0)


def _shard_records(model, chunk: list[torch.Tensor], tap_layers, s: ExtractionSettings, bar) -> list[dict]:
    """The features of one shard's sequences, in their order (batched by length when ``s.batch_tokens``)."""
    return ordered_features(model, chunk, tap_layers, s.taps_dtype, s.topk, s.batch_tokens, bar.update)
