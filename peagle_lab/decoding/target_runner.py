"""The target side of speculative decoding: :class:`TargetRunner` (the target model with its own KV cache,
positions advancing, rollback by ``crop``), which refuses what it cannot roll back
(:func:`peagle_lab.kv_cache.check_cache_rollback`)."""

from __future__ import annotations

import torch

from ..kv_cache import PositionCache, check_cache_rollback
from ..features.taps import check_tap_layers, default_tap_layers, target_forward


class TargetRunner:
    """The target model with its own KV cache (a :class:`~peagle_lab.kv_cache.PositionCache`, kept across
    generations). ``forward`` writes the new tokens' keys and values at the next positions; ``crop(n)`` keeps n."""

    def __init__(self, model, tap_layers=None):
        check_cache_rollback(model.config)
        self.model = model
        L = model.config.num_hidden_layers
        self.tap_layers = check_tap_layers(tap_layers or default_tap_layers(L), L)
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self):
        """Forget every position (the cache's buffers stay allocated for the next generation)."""
        if not isinstance(getattr(self, "cache", None), PositionCache):
            self.cache = PositionCache(self.model.config)
        self.cache.reset()
        self.length = 0

    @torch.no_grad()
    def forward(self, ids, need_taps: bool = True, last_only: bool = False):
        """ids: 1-D list/tensor of new tokens. Returns (logits (T,V), taps (T,3H) or None).

        ``last_only``: logits of the last position only, shape (1, V) (a prefill needs no more: the lm_head over
        a long prompt costs more than the rest of a decode step).
        """
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        T = ids.shape[1]
        pos = torch.arange(self.length, self.length + T, device=self.device)[None]
        keep = 1 if last_only else 0
        if need_taps:
            out = target_forward(self.model, ids, self.tap_layers, past_key_values=self.cache, position_ids=pos,
                                 logits_to_keep=keep)
            logits, taps, cache = out.logits, out.taps, out.past_key_values
        else:
            out = self.model(input_ids=ids, past_key_values=self.cache, position_ids=pos, use_cache=True,
                             logits_to_keep=keep)
            logits, taps, cache = out.logits, None, out.past_key_values
        self.cache = cache
        self.length += T
        return logits[0], (taps[0] if taps is not None else None)

    def crop(self, n: int):
        """Roll back to the first ``n`` positions (a negative count removes tokens, as transformers' caches take it;
        for the PositionCache that only sets its length)."""
        remove = self.length - n
        if remove > 0:
            self.cache.crop(-remove)
            self.length = n
