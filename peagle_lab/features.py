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
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import torch

from .atomic import umask, write_json
from .data import MAX_SEQ_LEN, load_distilled, select_split
from .errors import PeagleError
from .identity import target_fingerprint
from .prompts import chat_ids, load_train_prompts
from .settings import display_path
from .taps import check_tap_layers, default_tap_layers, target_forward
from .target_args import add_target_options, load_cli_target

FORMAT = "peagle-lab-features"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".partial"
TAP_CONVENTION = "tap i = residual stream entering decoder layer i (vLLM) = transformers hidden_states[i]"
PER_TOKEN_KEYS = ("input_ids", "taps", "greedy_next", "topk_values", "topk_indices")
ID_BYTES = 4  # input_ids and greedy_next are stored as int32

_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Settings that must match when a run is resumed in an existing directory.
_RESUME_KEYS = ("num_layers", "hidden_size", "vocab_size", "tap_layers", "taps_dtype", "topk", "shard_size",
                "num_sequences", "num_tokens", "prompts_sha256", "target_fingerprint")


def _dtype_name(dtype) -> str:
    for name, value in _DTYPES.items():
        if dtype in (value, name):
            return name
    raise PeagleError(f"Unsupported taps dtype {dtype!r}. Fix: use one of {sorted(_DTYPES)} (bfloat16 halves disk).")


def _dtype_bytes(dtype) -> int:
    return _DTYPES[_dtype_name(dtype)].itemsize


# --------------------------------------------------------------------------------------------------------------
# Disk arithmetic
# --------------------------------------------------------------------------------------------------------------

def bytes_per_token(hidden_size: int, n_taps: int = 3, taps_dtype=torch.bfloat16, topk: int = 0) -> int:
    """Bytes one token costs on disk: ``n_taps * H * dtype`` + int32 id + int32 greedy label + ``topk * 8``.

    Top-k logits are stored as float32 values plus int32 ids (8 bytes per kept logit). Shard headers and the
    offsets table add a few hundred bytes per shard, which this ignores.
    """
    return n_taps * hidden_size * _dtype_bytes(taps_dtype) + 2 * ID_BYTES + topk * 8


def estimate_bytes(num_tokens: int, hidden_size: int, n_taps: int = 3, taps_dtype=torch.bfloat16,
                   topk: int = 0) -> int:
    """Disk estimate for ``num_tokens`` tokens of features (see :func:`bytes_per_token`)."""
    return num_tokens * bytes_per_token(hidden_size, n_taps, taps_dtype, topk)


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KB'`` (powers of 1000, as disks are sold)."""
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError  # unreachable


# (name, hidden size) of targets people train EAGLE-3 / P-EAGLE heads for.
COST_MODELS = (
    ("SmolLM2-135M", 576),
    ("Llama-3.1-8B", 4096),
    ("GPT-OSS-20B", 2880),
)
# (name, sequences, tokens per sequence). ShareGPT as used by EAGLE: ~68k conversations, ~1.5k tokens each; the
# context rows are upper bounds for the same number of sequences filled to that length.
COST_DATASETS = (
    ("ShareGPT-like 68k x 1.5k", 68_000, 1_500),
    ("68k seqs @ 2k ctx", 68_000, 2_048),
    ("68k seqs @ 8k ctx", 68_000, 8_192),
    ("68k seqs @ 32k ctx", 68_000, 32_768),
)


def disk_cost_table(models=COST_MODELS, datasets=COST_DATASETS, n_taps: int = 3, topk: int = 0) -> list[dict]:
    """Disk needed to store offline EAGLE-3 features, one row per (model, dataset).

    Columns: ``model``, ``hidden``, ``dataset``, ``tokens``, ``bytes_per_token_bf16``, ``bytes_per_token_fp32``,
    ``offline_bf16`` and ``offline_fp32`` (total bytes), ``online`` (0: online extraction recomputes the taps
    with a target forward every epoch instead of storing them).
    """
    rows = []
    for model, hidden in models:
        for dataset, n_seq, seq_len in datasets:
            tokens = n_seq * seq_len
            bf16 = bytes_per_token(hidden, n_taps, torch.bfloat16, topk)
            fp32 = bytes_per_token(hidden, n_taps, torch.float32, topk)
            rows.append(dict(model=model, hidden=hidden, dataset=dataset, tokens=tokens,
                             bytes_per_token_bf16=bf16, bytes_per_token_fp32=fp32,
                             offline_bf16=tokens * bf16, offline_fp32=tokens * fp32, online=0))
    return rows


def format_cost_table(rows: list[dict]) -> str:
    """A plain-text table of :func:`disk_cost_table` rows."""
    header = ("model", "H", "dataset", "tokens", "B/token bf16", "offline bf16", "offline fp32", "online")
    lines = [[r["model"], str(r["hidden"]), r["dataset"], f"{r['tokens'] / 1e6:.0f}M",
              f"{r['bytes_per_token_bf16']:,}", format_bytes(r["offline_bf16"]), format_bytes(r["offline_fp32"]),
              "0 B"] for r in rows]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])


# --------------------------------------------------------------------------------------------------------------
# One sequence
# --------------------------------------------------------------------------------------------------------------

@torch.no_grad()
def sequence_features(model, input_ids, tap_layers=None, taps_dtype=torch.bfloat16, topk: int = 0) -> dict:
    """Features of one sequence: a dict of per-token tensors on the CPU (see the module docstring)."""
    num_layers = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(num_layers), num_layers)
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1).to(model.device)
    out = target_forward(model, ids, tap_layers, use_cache=False)
    logits = out.logits[0]
    rec = {
        "input_ids": ids[0].to(torch.int32).cpu(),
        "taps": out.taps[0].to(_DTYPES[_dtype_name(taps_dtype)]).cpu(),
        "greedy_next": logits.argmax(-1).to(torch.int32).cpu(),
    }
    if topk:
        values, indices = logits.float().topk(topk, dim=-1)
        rec["topk_values"] = values.cpu()
        rec["topk_indices"] = indices.to(torch.int32).cpu()
    return rec


def online_features(model, sequences: Iterable, tap_layers=None, taps_dtype=torch.float32,
                    topk: int = 0) -> Iterator[dict]:
    """Online extraction: yield :func:`sequence_features` dicts one sequence at a time (no disk)."""
    for ids in sequences:
        yield sequence_features(model, ids, tap_layers, taps_dtype, topk)


# --------------------------------------------------------------------------------------------------------------
# Offline extraction
# --------------------------------------------------------------------------------------------------------------

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


def _write_json_atomic(path: Path, obj) -> None:
    write_json(path, obj, indent=1)


def _shard_name(index: int) -> str:
    return f"shard-{index:05d}.safetensors"


def _save_shard(records: list[dict], path: Path, metadata: dict) -> None:
    from safetensors.torch import save_file

    lengths = torch.tensor([len(r["input_ids"]) for r in records], dtype=torch.int64)
    tensors = {"offsets": torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])}
    for key in PER_TOKEN_KEYS:
        if key in records[0]:
            tensors[key] = torch.cat([r[key] for r in records]).contiguous()
    tmp = path.with_name(path.name + PARTIAL_SUFFIX)
    try:
        # One metadata key: safetensors writes several in a random order, and shards must be byte-reproducible.
        save_file(tensors, str(tmp), metadata={FORMAT: json.dumps(metadata, sort_keys=True)})
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    except (OSError, RuntimeError) as e:  # safetensors reports a failed write as either
        tmp.unlink(missing_ok=True)
        raise PeagleError(f"Could not write {path.name} in {path.parent} ({e}): the disk may be full. Fix: free "
                          "space, then run the same extraction again: the complete shards are kept, this one is "
                          "redone.") from e

    os.chmod(tmp, 0o666 & ~umask())
    os.replace(tmp, path)  # atomic: the final name only ever holds a complete shard


def _shard_is_complete(out_dir: Path, entry: dict) -> bool:
    path = out_dir / entry["file"]
    return path.is_file() and path.stat().st_size == entry["bytes"]


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


def extract_features(model, sequences: Sequence, out_dir, tap_layers=None, shard_size: int = 64,
                     taps_dtype=torch.bfloat16, topk: int = 0, target: str | None = None, progress: bool = True,
                     on_shard: Callable[[int, Path], None] | None = None, verbose: bool = True) -> ExtractionResult:
    """Extract features of ``sequences`` (token ids) into ``out_dir`` as shards of ``shard_size`` sequences.

    Prints the disk estimate before starting and the real size after. Resumable: call again with the same
    arguments after an interruption and the complete shards are kept; a directory holding features made with
    other settings (taps, dtype, top-k, shard size, prompts or target) is refused. ``on_shard(index, path)`` runs
    after each shard is safely on disk. Taps default to bfloat16 on disk (half of float32). One writer per
    directory: a second process extracting into the same directory at the same time is not guarded against.
    """
    from tqdm.auto import tqdm

    cfg = model.config
    num_layers, hidden = cfg.num_hidden_layers, cfg.hidden_size
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(num_layers), num_layers)
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
        target_fingerprint=target_fingerprint(model),
        num_layers=num_layers, hidden_size=hidden, vocab_size=cfg.vocab_size,
        tap_layers=list(tap_layers), tap_convention=TAP_CONVENTION,
        taps_dtype=_dtype_name(taps_dtype), topk=topk, shard_size=shard_size,
        num_sequences=len(seqs), num_tokens=num_tokens, prompts_sha256=_prompts_sha256(seqs),
        keys=[k for k in PER_TOKEN_KEYS if topk or not k.startswith("topk")],
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*" + PARTIAL_SUFFIX):  # leftovers of an interrupted write: never complete
        stale.unlink()
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
              f"({len(tap_layers)} x {hidden} x {_dtype_bytes(taps_dtype)} B {_dtype_name(taps_dtype)} taps + "
              f"int32 id + int32 greedy label" + (f" + top-{topk} logits" if topk else "") + ")"
              + (f"; resuming: {len(done)} of {n_shards} shard(s) already complete" if done else ""))

    manifest = dict(settings, complete=len(done) == n_shards, shards=[done[i] for i in sorted(done)])
    _write_json_atomic(out_dir / MANIFEST, manifest)

    skipped_tokens = sum(e["num_tokens"] for e in done.values())
    bar = tqdm(total=num_tokens, initial=skipped_tokens, unit="tok", unit_scale=True, desc="extract",
               disable=not progress)
    written, seconds = 0, 0.0
    try:
        for index, (lo, hi) in enumerate(bounds):
            if index in done:
                continue
            t0 = time.perf_counter()
            records = []
            for ids in seqs[lo:hi]:
                records.append(sequence_features(model, ids, tap_layers, taps_dtype, topk))
                bar.update(len(ids))
            path = out_dir / _shard_name(index)
            _save_shard(records, path, dict(version=FORMAT_VERSION, shard=index, first_sequence=lo))
            seconds += time.perf_counter() - t0
            written += 1
            entry = dict(index=index, file=path.name, first_sequence=lo, num_sequences=hi - lo,
                         num_tokens=sum(len(r["input_ids"]) for r in records), bytes=path.stat().st_size)
            manifest["shards"] = sorted(manifest["shards"] + [entry], key=lambda e: e["index"])
            manifest["complete"] = len(manifest["shards"]) == n_shards
            _write_json_atomic(out_dir / MANIFEST, manifest)
            if on_shard is not None:
                on_shard(index, path)
    finally:
        bar.close()

    size = sum(e["bytes"] for e in manifest["shards"]) + (out_dir / MANIFEST).stat().st_size
    computed = num_tokens - skipped_tokens
    result = ExtractionResult(out_dir, manifest, num_tokens, estimate, size, written, len(done), seconds, computed)
    if verbose:
        speed = f", {computed:,} tokens in {seconds:.1f} s = {result.tokens_per_s:,.0f} tok/s" if written else ""
        print(f"Wrote {written} shard(s) (skipped {len(done)} complete){speed}. "
              f"On disk: {format_bytes(size)} (estimate {format_bytes(estimate)}).")
    return result


# --------------------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------------------

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
    p.add_argument("--store-dtype", default="bfloat16", choices=sorted(_DTYPES), help="taps dtype on disk")
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
                     taps_dtype=_DTYPES[args.store_dtype], topk=args.topk, target=target)
