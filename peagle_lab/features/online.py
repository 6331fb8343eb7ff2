"""The features of one sequence straight from the target: one forward, tapped residual streams, greedy labels.

:func:`sequence_features` is what the offline writer stores per sequence; :func:`online_features` yields the
same dicts with no disk at all (one target forward per sequence per epoch).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch

from .format import TAPS_DTYPES, taps_dtype_name
from .taps import check_tap_layers, default_tap_layers, target_forward


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
        "taps": out.taps[0].to(TAPS_DTYPES[taps_dtype_name(taps_dtype)]).cpu(),
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
