"""The target side of speculative decoding: :class:`TargetRunner` (the target model with its own KV cache,
positions advancing, rollback by ``crop``) and :func:`check_cache_rollback` (which targets can be rolled back:
every attention layer, full, sliding-window or chunked; nothing with a running state)."""

from __future__ import annotations

import torch

from ..errors import PeagleError
from ..kv_cache import PositionCache
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


# Attention layer types whose state is one key/value pair per position: the PositionCache keeps every position
# (never evicts), and the model's own attention mask applies the window or chunk, so a crop rolls them back exactly.
ROLLBACK_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


def check_cache_rollback(config) -> None:
    """Refuse a target whose state ``TargetRunner.crop`` cannot roll back.

    The loop's :class:`~peagle_lab.kv_cache.PositionCache` keeps the keys and values of every position and reports
    itself as a full cache, so transformers' mask functions apply a layer's window (``sliding_attention``,
    GPT-OSS / Mistral / Gemma style) or chunk (``chunked_attention``) to absolute positions: the attention is the
    model's own, and rolling back is setting the length, as for full attention. Attention sinks are a per-head
    logit, not state. What keeps a running state instead of per-position keys (linear attention, convolutions,
    state-space / recurrent layers) cannot be cropped and is refused, in one line naming the layer types."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    layer_types = list(getattr(cfg, "layer_types", None) or [])
    stateful = {}
    for i, kind in enumerate(layer_types):
        if kind not in ROLLBACK_LAYER_TYPES:
            stateful.setdefault(kind, []).append(i)
    if stateful:
        kinds = "; ".join(f"{len(ids)} '{kind}' layer(s) (e.g. layer {ids[0]})" for kind, ids in stateful.items())
        raise PeagleError(
            f"{kinds} keep a running state that cannot be rolled back after a rejected draft (only "
            f"{', '.join(ROLLBACK_LAYER_TYPES)} layers can), so speculative output would no longer equal plain "
            "decoding. Fix: use an attention-only target (Llama, Qwen3, GPT-OSS, Mistral, SmolLM2, ...), or serve "
            "this one with vLLM (serving.export_vllm), which manages its own state.")
