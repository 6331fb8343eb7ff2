"""What offline EAGLE-3 features cost on disk: bytes per token, estimates, and the table of well-known targets.

Online extraction (:mod:`.online`) stores nothing; this is the arithmetic of the other side of that
trade-off, the same the writer (:mod:`.writer`) prints before it starts.
"""

from __future__ import annotations

import torch

from .format import ID_BYTES, dtype_bytes


def bytes_per_token(hidden_size: int, n_taps: int = 3, taps_dtype=torch.bfloat16, topk: int = 0) -> int:
    """Bytes one token costs on disk: ``n_taps * H * dtype`` + int32 id + int32 greedy label + ``topk * 8``.

    Top-k logits are stored as float32 values plus int32 ids (8 bytes per kept logit). Shard headers and the
    offsets table add a few hundred bytes per shard, which this ignores.
    """
    return n_taps * hidden_size * dtype_bytes(taps_dtype) + 2 * ID_BYTES + topk * 8


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
