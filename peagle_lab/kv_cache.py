"""KV caches indexed by position, for the drafter and for the target.

Both are built from :class:`PositionBuffer`: one layer's keys and values in a preallocated
``(B, n_kv, capacity, head_dim)`` buffer, written at positions ``length .. length+T-1``, grown by doubling when
full, read back as views up to the written end. Rolling back is setting the length: nothing is copied, and a
speculative round costs a write of its own new positions, never a copy of the whole cache (the concatenating
caches did one per layer and per forward).

* :class:`DrafterCache`: the drafter head's own cache (``update(layer, k, v)``, ``crop(n)``, ``len()``);
* :class:`PositionCache`: the target's, a transformers ``Cache`` whose layers are :class:`PositionLayer`, so the
  target model runs its own attention code unchanged (``TargetRunner`` uses it; ``crop(-n)`` removes n positions
  as ``DynamicCache.crop`` does).

Under autograd (training: keys that require grad, grad mode on) a write would modify tensors earlier depths saved
for backward, so there the buffer concatenates instead (a training cache is never rolled back).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .errors import PeagleError

MIN_CAPACITY = 256  # positions a buffer starts with (grown by doubling)


class PositionBuffer:
    """One attention layer's keys and values, written at positions; ``length`` positions are valid."""

    def __init__(self, min_capacity: int = MIN_CAPACITY):
        self.min_capacity = int(min_capacity)
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0

    @property
    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def write(self, k: torch.Tensor, v: torch.Tensor):
        """Write (B, n_kv, T, hd) keys/values at positions ``length .. length+T-1``; return the views of
        positions ``0 .. length+T-1``."""
        start, end = self.length, self.length + k.shape[2]
        if torch.is_grad_enabled() and (k.requires_grad or v.requires_grad):
            if start:  # autograd: a new tensor, so what earlier passes saved for backward stays intact
                k = torch.cat([self.k[:, :, :start], k], dim=2)
                v = torch.cat([self.v[:, :, :start], v], dim=2)
            self.k, self.v, self.length = k, v, end
            return k, v
        buf_k, buf_v = self.k, self.v
        if buf_k is None or end > buf_k.shape[2] or (start == 0 and not self._fits(k, v)):
            if buf_k is not None and not self._fits(k, v):
                if start:
                    raise ValueError(f"keys of shape {tuple(k.shape)} ({k.dtype}) do not continue a cache of shape "
                                     f"{tuple(buf_k.shape)} ({buf_k.dtype}): reset it first")
                self.k = self.v = None  # empty: start afresh for the new shape, dtype or device
            self._grow(end, k, v)
            buf_k, buf_v = self.k, self.v
        buf_k[:, :, start:end] = k  # a continuing write: copy_'s own checks refuse a changed shape
        buf_v[:, :, start:end] = v
        self.length = end
        return buf_k[:, :, :end], buf_v[:, :, :end]

    def _fits(self, k, v) -> bool:
        b = self.k  # same batch, heads, head size, dtype and device
        return (b.shape[:2] == k.shape[:2] and b.shape[3] == k.shape[3] and b.dtype == k.dtype
                and b.device == k.device and self.v.shape[3] == v.shape[3] and self.v.dtype == v.dtype)

    def _grow(self, end: int, k, v):
        cap = max(self.min_capacity, self.capacity)
        while cap < end:
            cap *= 2
        B, H, _, D = k.shape
        new_k = k.new_empty(B, H, cap, D)
        new_v = v.new_empty(B, v.shape[1], cap, v.shape[3])
        if self.length:  # keep what is written
            new_k[:, :, :self.length].copy_(self.k[:, :, :self.length])
            new_v[:, :, :self.length].copy_(self.v[:, :, :self.length])
        self.k, self.v = new_k, new_v

    def truncate(self, n: int):
        """Keep the first ``n`` positions (rollback: the buffer itself stays)."""
        self.length = max(0, min(self.length, int(n)))

    def views(self):
        """(keys, values) of the written positions, or (None, None) before the first write."""
        if self.k is None:
            return None, None
        return self.k[:, :, :self.length], self.v[:, :, :self.length]


class DrafterCache:
    """The drafter's own KV cache: per layer (B, n_kv, T, hd) up to the written end. Rollback = keep the first
    ``n`` positions (``crop(n)``)."""

    def __init__(self, num_layers: int, min_capacity: int = MIN_CAPACITY):
        self.layers = [PositionBuffer(min_capacity) for _ in range(num_layers)]

    def __len__(self):
        return self.layers[0].length

    def update(self, layer: int, k, v):
        return self.layers[layer].write(k, v)

    def crop(self, n: int):
        for buf in self.layers:
            buf.truncate(n)


class PositionLayer(CacheLayerMixin):
    """A transformers cache layer over a :class:`PositionBuffer` (full attention; croppable)."""

    is_sliding = False
    is_croppable = True
    is_compileable = False

    def __init__(self, min_capacity: int = MIN_CAPACITY, **kwargs):
        super().__init__()
        self.buffer = PositionBuffer(min_capacity)

    def lazy_initialization(self, key_states, value_states) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self.values = self.buffer.write(key_states, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.buffer.length + query_length, 0

    def get_seq_length(self) -> int:
        return self.buffer.length

    def get_max_length(self) -> int:
        return -1

    def crop(self, tokens_to_remove: int) -> None:
        """A negative count removes that many positions; a positive one keeps that many (transformers' legacy)."""
        n = self.buffer.length + tokens_to_remove if tokens_to_remove < 0 else tokens_to_remove
        self.buffer.truncate(n)
        self.keys, self.values = self.buffer.views()

    def reset(self) -> None:
        self.buffer.truncate(0)
        self.keys, self.values = self.buffer.views()


class PositionCache(Cache):
    """The target's KV cache for ``TargetRunner``: one :class:`PositionLayer` per decoder layer."""

    def __init__(self, config, min_capacity: int = MIN_CAPACITY):
        cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
        super().__init__(layers=[PositionLayer(min_capacity) for _ in range(cfg.num_hidden_layers)])

    def buffers(self) -> list[PositionBuffer]:
        return [layer.buffer for layer in self.layers]


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
