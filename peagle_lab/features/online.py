"""The features of sequences straight from the target: one forward, tapped residual streams, greedy labels.

:func:`sequence_features` is what the offline writer stores per sequence; :func:`batch_features` computes the
same dicts for several sequences in one target forward (right-padded, with an attention mask: what a real token
sees is unchanged, so its features equal the one-at-a-time ones up to the dtype's rounding);
:func:`length_batches` groups sequences of similar length so that little of a batch is padding;
:func:`online_features` yields the dicts with no disk at all (one target forward per sequence per epoch).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from .format import TAPS_DTYPES, taps_dtype_name
from .taps import check_tap_layers, default_tap_layers, target_forward


def _record(ids, logits, taps, taps_dtype, topk: int) -> dict:
    """The stored dict of one sequence from its ids (T,), logits (T, V) and taps (T, 3H)."""
    rec = {
        "input_ids": ids.to(torch.int32).cpu(),
        "taps": taps.to(TAPS_DTYPES[taps_dtype_name(taps_dtype)]).cpu(),
        "greedy_next": logits.argmax(-1).to(torch.int32).cpu(),
    }
    if topk:
        values, indices = logits.float().topk(topk, dim=-1)
        rec["topk_values"] = values.cpu()
        rec["topk_indices"] = indices.to(torch.int32).cpu()
    return rec


@torch.no_grad()
def sequence_features(model, input_ids, tap_layers=None, taps_dtype=torch.bfloat16, topk: int = 0) -> dict:
    """Features of one sequence: a dict of per-token tensors on the CPU (see the module docstring)."""
    num_layers = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(num_layers), num_layers)
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1).to(model.device)
    out = target_forward(model, ids, tap_layers, use_cache=False)
    return _record(ids[0], out.logits[0], out.taps[0], taps_dtype, topk)


@torch.no_grad()
def batch_features(model, sequences, tap_layers=None, taps_dtype=torch.bfloat16, topk: int = 0,
                   pad_id: int = 0) -> list[dict]:
    """:func:`sequence_features` of several sequences with ONE target forward: right-padded to the longest with
    ``pad_id``, an attention mask over the real tokens. Right padding keeps every real token at its own position,
    and causal attention keeps the padding (always later) out of its view, so each result equals the
    one-at-a-time one up to the rounding of a differently shaped matrix product."""
    num_layers = model.config.num_hidden_layers
    tap_layers = check_tap_layers(tap_layers or default_tap_layers(num_layers), num_layers)
    seqs = [torch.as_tensor(s, dtype=torch.long).reshape(-1) for s in sequences]
    if len(seqs) == 1:
        return [sequence_features(model, seqs[0], tap_layers, taps_dtype, topk)]
    longest = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), longest), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(seqs), longest), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    out = target_forward(model, ids.to(model.device), tap_layers, attention_mask=mask.to(model.device),
                         use_cache=False)
    return [_record(s, out.logits[i, : len(s)], out.taps[i, : len(s)], taps_dtype, topk)
            for i, s in enumerate(seqs)]


def length_batches(lengths, batch_tokens: int, max_batch: int | None = None) -> list[list[int]]:
    """Indices of sequences grouped into batches of similar length (by ascending length), each batch's padded
    size (sequences x its longest) at most ``batch_tokens`` (a longer sequence goes alone) and at most
    ``max_batch`` sequences. Every index appears exactly once."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, cur = [], []
    for i in order:
        longest = lengths[i]  # ascending: the newest is the longest of the batch
        if cur and ((len(cur) + 1) * longest > batch_tokens or (max_batch and len(cur) >= max_batch)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def ordered_features(model, sequences: list, tap_layers, taps_dtype, topk: int = 0, batch_tokens: int = 0,
                     on_batch=None) -> list[dict]:
    """The features of ``sequences`` in their order: with ``batch_tokens`` > 0 those of similar length share a
    target forward of at most that many padded tokens (:func:`length_batches`, :func:`batch_features`), else one
    sequence per forward. ``on_batch(tokens)`` after each forward (a progress bar)."""
    out: list = [None] * len(sequences)
    groups = (length_batches([len(x) for x in sequences], batch_tokens) if batch_tokens
              else [[i] for i in range(len(sequences))])
    for group in groups:
        for i, rec in zip(group, batch_features(model, [sequences[i] for i in group], tap_layers, taps_dtype, topk)):
            out[i] = rec
        if on_batch is not None:
            on_batch(sum(len(sequences[i]) for i in group))
    return out


def online_features(model, sequences: Iterable, tap_layers=None, taps_dtype=torch.float32,
                    topk: int = 0) -> Iterator[dict]:
    """Online extraction: yield :func:`sequence_features` dicts one sequence at a time (no disk)."""
    for ids in sequences:
        yield sequence_features(model, ids, tap_layers, taps_dtype, topk)
