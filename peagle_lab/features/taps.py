"""EAGLE-3 hidden-state taps on a Hugging Face decoder.

Convention (vLLM's): tap id ``i`` is the residual stream ENTERING decoder layer ``i``. In transformers'
``output_hidden_states`` tuple, ``hidden_states[0]`` is the embedding output and ``hidden_states[i]`` is the
output of layer ``i-1`` = the input of layer ``i``; so tap ``i`` is simply ``hidden_states[i]`` for
``0 <= i < num_layers``. (``hidden_states[num_layers]`` is post-final-norm in transformers, so it is not a
valid tap.) vLLM's default taps for an L-layer target are ``(2, L // 2, L - 3)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import PeagleError


def default_tap_layers(num_layers: int) -> tuple[int, int, int]:
    """vLLM's EAGLE-3 default: residual stream entering layers 2, L//2 and L-3."""
    taps = (2, num_layers // 2, num_layers - 3)
    if not taps[0] < taps[1] < taps[2]:
        # Shallow (test) models, L < 7: first, middle and last layer inputs instead, distinct where L >= 3.
        taps = (0, num_layers // 2, max(num_layers - 1, 0))
    return taps


def tap_range_problem(tap_layers, num_layers: int) -> str | None:
    """Why ``tap_layers`` cannot be tapped in a ``num_layers``-layer target (None: every id is a layer)."""
    bad = [int(t) for t in tap_layers if not 0 <= int(t) < num_layers]
    return f"tap layer ids {bad} are out of range for a target with {num_layers} layers" if bad else None


def check_tap_layers(tap_layers, num_layers: int, flag: str | None = None) -> tuple[int, ...]:
    """Tap ids in ``[0, num_layers)``; a list the user gave (``flag``: where, e.g. ``--taps``) must also be
    distinct and ascending, the order the features and the head store them in (a shallow test model's default
    may repeat one)."""
    taps = tuple(int(t) for t in tap_layers)
    problem = tap_range_problem(taps, num_layers)
    if problem:
        raise PeagleError(
            f"{problem[0].upper()}{problem[1:]}: a tap id i means the residual stream entering layer i, so it must be "
            f"in [0, {num_layers - 1}]. Fix: choose ids in range, e.g. the default {default_tap_layers(num_layers)}."
        )
    if flag is not None and (not taps or any(a >= b for a, b in zip(taps, taps[1:]))):
        raise PeagleError(f"{flag} {','.join(map(str, taps))}: tap layer ids must be distinct and ascending. Fix: "
                          f"{flag} {','.join(map(str, sorted(set(taps))))} (vLLM's default here: "
                          f"{','.join(map(str, default_tap_layers(num_layers)))}).")
    return taps


@dataclass
class TargetOutput:
    logits: torch.Tensor  # (B, T, V) next-token logits
    taps: torch.Tensor  # (B, T, n_taps * H): the tapped states, concatenated in tap order
    last_hidden: torch.Tensor  # (B, T, H): post-norm last hidden state (what lm_head reads)
    past_key_values: object = None


def target_forward(model, input_ids, tap_layers, past_key_values=None, position_ids=None,
                   attention_mask=None, use_cache: bool = True, logits_to_keep: int = 0) -> TargetOutput:
    """One target forward returning logits, the concatenated taps and the cache.

    ``logits_to_keep=n > 0``: the lm_head runs over the last ``n`` positions only (a prefill needs one).
    """
    out = model(
        input_ids=input_ids,
        past_key_values=past_key_values,
        position_ids=position_ids,
        attention_mask=attention_mask,
        use_cache=use_cache,
        output_hidden_states=True,
        logits_to_keep=logits_to_keep,
    )
    hs = out.hidden_states
    taps = torch.cat([hs[i] for i in tap_layers], dim=-1)
    return TargetOutput(out.logits, taps, hs[-1], out.past_key_values)
