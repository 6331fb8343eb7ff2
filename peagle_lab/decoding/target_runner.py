"""The target side of speculative decoding: :class:`TargetRunner` (the target model with its own KV cache,
positions advancing, rollback by ``crop``) and :func:`check_cache_rollback` (which targets can be rolled back)."""

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


def check_cache_rollback(config) -> None:
    """Refuse a target whose KV cache ``TargetRunner.crop`` cannot roll back: sliding-window (or chunked)
    attention layers keep only their last ``window`` positions, so after a rejected draft the evicted positions
    cannot come back and the next verification would attend to the wrong keys (output no longer equal to plain
    decoding); other non-attention layer types (linear attention, convolutions, state-space layers) keep a running
    state a crop does not rewind.

    Rule: every layer in ``layer_types`` is ``full_attention``, or is ``sliding_attention`` / ``chunked_attention``
    with a window (``sliding_window`` / ``attention_chunk_size``) >= ``max_position_embeddings`` (never evicts:
    global in effect); without ``layer_types``, an integer ``sliding_window`` below ``max_position_embeddings`` makes
    every layer sliding unless ``use_sliding_window`` is False (Mistral / Qwen2 style)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    max_pos = getattr(cfg, "max_position_embeddings", None)

    def evicts(window):
        return isinstance(window, int) and not isinstance(window, bool) and window > 0 and (
            max_pos is None or window < max_pos)

    sliding, chunk = getattr(cfg, "sliding_window", None), getattr(cfg, "attention_chunk_size", None)
    layer_types = list(getattr(cfg, "layer_types", None) or [])
    problems = []
    if layer_types:
        windowed = {"sliding_attention": ("sliding_window", sliding), "chunked_attention": ("attention_chunk_size",
                                                                                            chunk)}
        for kind in dict.fromkeys(layer_types):
            layers = [i for i, t in enumerate(layer_types) if t == kind]
            if kind == "full_attention":
                continue
            if kind in windowed:
                name, window = windowed[kind]
                if evicts(window):
                    problems.append(f"{len(layers)} '{kind}' layer(s) (e.g. layer {layers[0]}) with {name}={window} "
                                    f"< max_position_embeddings={max_pos}")
            else:
                problems.append(f"{len(layers)} '{kind}' layer(s) (e.g. layer {layers[0]}), which keep a running "
                                "state instead of a per-position KV cache")
    elif evicts(sliding) and getattr(cfg, "use_sliding_window", True) is not False:
        problems.append(f"sliding_window={sliding} < max_position_embeddings={max_pos} on every layer")
    if problems:
        raise PeagleError(
            "This target cannot be used for speculative decoding here: " + "; ".join(problems) + ". A sliding-window "
            "(or stateful) cache drops what a rejected draft needs restored, and TargetRunner.crop can only roll back "
            "a full-attention KV cache, so the output would no longer equal plain decoding. Accepted: full-attention "
            "layers, and windows >= max_position_embeddings (global in effect). Fix: use a full-attention target "
            "(Llama, Qwen3, SmolLM2, ...); or, when prompt plus output always fit in the window, load the target "
            "with max_position_embeddings <= sliding_window (or use_sliding_window=False where the model was trained "
            "with global attention); or serve it with vLLM (serving.export_vllm), which manages its own KV cache.")
