"""The P-EAGLE drafter network: an EAGLE-3 head that can also draft K tokens in ONE forward pass.

It computes exactly what vLLM's ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py in the
vLLM source) computes, so a head trained here serves unchanged in vLLM:

* target features: three tapped residual streams, concatenated (3H), ``fc`` -> H;
* layer 0 (``midlayer``): ``attn(cat[input_layernorm(emb), hidden_norm(h)])`` with residual ``h``, then MLP;
* later layers (``layers.1``...): ordinary Llama layers on (hidden, residual);
* ``prenorm = hidden + residual``; logits = ``lm_head(norm(prenorm))`` over the draft vocabulary; ``d2t`` maps
  draft ids to target ids (:mod:`peagle_lab.vocab`).

Parallel drafting (P-EAGLE): after the last real slot come K-1 slots with the mask token embedding and the
hidden state ``fc(mask_hidden)`` at positions ``start + j``; ordinary causal attention. Sequential drafting
(EAGLE-3): each further step feeds the drafted token and the previous step's ``prenorm``.

The configuration lives in :mod:`.config`, the checkpoint format in :mod:`.checkpoint`.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import PeagleError
from ..vocab import d2t_t2d, draft_ids_from_d2t
from . import checkpoint
from .config import _FIX, PEagleConfig


# --------------------------------------------------------------------------------------------- layers
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype):
    """Llama (neox-style, rotate-half) rotary tables for integer positions of shape (B, T)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    freqs = positions.float()[..., None] * inv  # (B, T, hd/2)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]  # (B, 1, T, hd)


class RotaryTables:
    """The head's rotary cos/sin for integer positions, from its ``rope_parameters`` (the target's).

    ``rope_type`` default: :func:`rope_cos_sin` with ``rope_theta`` (what the head always computed). Any other type
    (llama3, yarn, linear, dynamic, longrope, ...): transformers' own ``LlamaRotaryEmbedding`` for a Llama config
    with the head's shape and these parameters -- the inverse frequencies and attention scaling the target uses and
    vLLM builds from the exported config. Not an ``nn.Module`` of the head: its tables stay float32 when the head is
    cast to bf16 and it adds nothing to the checkpoint; it follows the positions' device."""

    def __init__(self, cfg: "PEagleConfig"):
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        self.params = dict(cfg.rope_parameters)
        self.hf = None if self.params["rope_type"] == "default" else self._transformers_rotary(cfg)

    def _transformers_rotary(self, cfg):
        from transformers import LlamaConfig  # lazy: only a non-default RoPE needs transformers' tables
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        try:
            lcfg = LlamaConfig(hidden_size=cfg.hidden_size, num_attention_heads=cfg.num_attention_heads,
                               num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
                               intermediate_size=cfg.intermediate_size, vocab_size=cfg.vocab_size,
                               num_hidden_layers=cfg.num_hidden_layers,
                               max_position_embeddings=cfg.max_position_embeddings,
                               rope_parameters=copy.deepcopy(self.params))
            rotary = LlamaRotaryEmbedding(lcfg)
        except (KeyError, ValueError, TypeError) as exc:
            raise PeagleError(f"rope_parameters {self.params} cannot build the rotary embedding ({exc!r}): a field "
                              f"that rope_type {self.params['rope_type']!r} needs is missing or wrong. {_FIX}") from exc
        if rotary.inv_freq.numel() != self.head_dim // 2:
            raise PeagleError(f"rope_parameters {self.params} rotate {2 * rotary.inv_freq.numel()} of "
                              f"{self.head_dim} head dimensions: the head supports full RoPE only.")
        return rotary

    def __call__(self, positions: torch.Tensor, dtype):
        """(B, T) positions -> cos, sin of shape (B, 1, T, head_dim) in ``dtype``."""
        if self.hf is None:
            return rope_cos_sin(positions, self.head_dim, self.theta, dtype)
        if self.hf.inv_freq.device != positions.device:
            self.hf.to(positions.device)
        cos, sin = self.hf(torch.empty(0, device=positions.device, dtype=dtype), positions)
        return cos[:, None], sin[:, None]


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: PEagleConfig, in_dim: int):
        super().__init__()
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(in_dim, self.nh * self.hd, bias=False)
        self.k_proj = nn.Linear(in_dim, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(in_dim, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, mask, cache=None, layer=0):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if self.nkv != self.nh:
            rep = self.nh // self.nkv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class MLP(nn.Module):
    def __init__(self, cfg: PEagleConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """``first=True``: EAGLE-3's midlayer (2H attention input, hidden_norm); else a plain Llama layer."""

    def __init__(self, cfg: PEagleConfig, first: bool):
        super().__init__()
        H = cfg.hidden_size
        self.first = first
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        if first:
            self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, 2 * H if first else H)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, embeds, hidden, residual, cos, sin, mask, cache, layer):
        if self.first:
            residual = hidden
            x = torch.cat([self.input_layernorm(embeds), self.hidden_norm(hidden)], dim=-1)
        else:
            residual = hidden + residual
            x = self.input_layernorm(residual)
        residual = self.self_attn(x, cos, sin, mask, cache, layer) + residual
        hidden = self.mlp(self.post_attention_layernorm(residual))
        return hidden, residual


class DrafterCache:
    """The drafter's own KV cache: per layer (B, n_kv, T, hd). Rollback = keep the first ``n`` positions."""

    def __init__(self, num_layers: int):
        self.k = [None] * num_layers
        self.v = [None] * num_layers

    def __len__(self):
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def update(self, layer, k, v):
        if self.k[layer] is not None:
            k = torch.cat([self.k[layer], k], dim=2)
            v = torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def crop(self, n: int):
        for i in range(len(self.k)):
            if self.k[i] is not None:
                self.k[i] = self.k[i][:, :, :n]
                self.v[i] = self.v[i][:, :, :n]


# --------------------------------------------------------------------------------------------- model
class PEagleDrafter(nn.Module):
    """The head: ``forward`` over (tokens, fused target hidden states, positions); checkpoint methods delegate to
    :mod:`.checkpoint`."""

    def __init__(self, cfg: PEagleConfig):
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        self.fc = nn.Linear(cfg.num_taps * cfg.target_hidden_size, H, bias=False)
        self.mask_hidden = nn.Parameter(torch.zeros(1, 1, cfg.num_taps * cfg.target_hidden_size))
        self.midlayer = DecoderLayer(cfg, first=True)
        self.layers = nn.ModuleDict({str(i): DecoderLayer(cfg, first=False) for i in range(1, cfg.num_hidden_layers)})
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool)
                             if cfg.draft_vocab_size == cfg.vocab_size else torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self.rotary = RotaryTables(cfg)
        self._init_weights()

    def _init_weights(self):
        std = 0.02
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=std)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=std)
        nn.init.normal_(self.mask_hidden, std=std)

    # ---- construction helpers ----
    @property
    def decoder_layers(self):
        return [self.midlayer] + [self.layers[str(i)] for i in range(1, self.config.num_hidden_layers)]

    @torch.no_grad()
    def init_from_target(self, target, draft_ids: torch.Tensor | None = None):
        """Start from the target's embeddings, final norm and lm_head (rows of the draft vocabulary)."""
        emb = target.get_input_embeddings().weight
        self._check_target_dims(target.config)
        self.embed_tokens.weight.copy_(emb)
        self.norm.weight.copy_(target.model.norm.weight)
        head = target.get_output_embeddings().weight
        ids = draft_ids if draft_ids is not None else self.draft_to_target_ids()
        self.lm_head.weight.copy_(head[ids.to(head.device)])
        return self

    def set_draft_vocab(self, draft_ids: torch.Tensor):
        """``draft_ids``: sorted target ids kept in the draft vocabulary (length draft_vocab_size)."""
        draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)
        if draft_ids.numel() != self.config.draft_vocab_size:
            raise PeagleError(f"draft vocabulary has {draft_ids.numel()} ids, config says {self.config.draft_vocab_size}")
        d2t, t2d = d2t_t2d(draft_ids, self.config.vocab_size)
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)

    def draft_to_target_ids(self) -> torch.Tensor:
        """The target id of every draft id (``target = draft + d2t``), on the head's device."""
        return draft_ids_from_d2t(self.d2t)

    def _check_target_dims(self, tcfg):
        c = self.config
        problems = []
        if tcfg.vocab_size != c.vocab_size:
            problems.append(f"vocabulary {c.vocab_size} (head) vs {tcfg.vocab_size} (target)")
        if tcfg.hidden_size != c.target_hidden_size:
            problems.append(f"hidden size {c.target_hidden_size} (head) vs {tcfg.hidden_size} (target)")
        bad_taps = [t for t in c.aux_hidden_state_layer_ids if not 0 <= t < tcfg.num_hidden_layers]
        if bad_taps:
            problems.append(f"tap layers {bad_taps} do not exist in a {tcfg.num_hidden_layers}-layer target")
        if problems:
            raise PeagleError(
                "This drafter head does not fit the target: " + "; ".join(problems) +
                ". Fix: use a head trained for this target (see notebook 03 / `peagle-lab train`).")

    def check_compatible(self, target):
        self._check_target_dims(target.config)

    # ---- forward ----
    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """(..., 3H) concatenated target taps -> (..., H)."""
        return self.fc(taps)

    def mask_slot_hidden(self) -> torch.Tensor:
        """The shared hidden state of mask slots 2..K: fc(mask_hidden), shape (1, 1, H)."""
        return self.fc(self.mask_hidden)

    def forward(self, input_ids, hidden, positions, cache: DrafterCache | None = None, attn_mask=None,
                input_embeds=None, logits_from: int = 0):
        """input_ids (B,T); hidden (B,T,H) already fused; positions (B,T).

        ``logits_from``: the lm_head runs over slots ``logits_from:`` only (a round needs the draft slots, not
        the newly committed context slots before them).

        ``attn_mask``: bool (B or 1, 1, T, S) where True = may attend; default causal over cache + new slots.
        Returns (draft-vocab logits (B,T,Vd), prenorm hidden (B,T,H)).
        """
        B, T = input_ids.shape
        embeds = self.embed_tokens(input_ids) if input_embeds is None else input_embeds
        cos, sin = self.rotary(positions, hidden.dtype)
        if attn_mask is None:
            past = len(cache) if cache is not None else 0
            attn_mask = torch.ones(T, past + T, dtype=torch.bool, device=hidden.device).tril(diagonal=past)[None, None]
        residual = None
        h = hidden
        for i, layer in enumerate(self.decoder_layers):
            h, residual = layer(embeds, h, residual, cos, sin, attn_mask, cache, i)
        prenorm = h + residual
        return self.lm_head(self.norm(prenorm[:, logits_from:])), prenorm

    def to_target_logits(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Scatter draft-vocab logits into the target vocabulary (unmapped ids: -inf), like vLLM."""
        if self.config.draft_vocab_size == self.config.vocab_size:
            return draft_logits
        out = draft_logits.new_full((*draft_logits.shape[:-1], self.config.vocab_size), float("-inf"))
        out[..., self.draft_to_target_ids()] = draft_logits
        return out

    def new_cache(self) -> DrafterCache:
        return DrafterCache(self.config.num_hidden_layers)

    # ---- checkpoint (peagle_lab.drafter.checkpoint) ----
    def export_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights under vLLM's eagle3 names (see docs/checkpoint-format.md)."""
        return checkpoint.export_state_dict(self)

    def save_pretrained(self, path, dtype: torch.dtype | None = torch.bfloat16):
        """Write ``config.json`` and ``model.safetensors`` to ``path`` (see :func:`.checkpoint.save_pretrained`)."""
        return checkpoint.save_pretrained(self, path, dtype)

    @classmethod
    def from_pretrained(cls, path, target=None, device=None, dtype=torch.float32) -> "PEagleDrafter":
        """Load a head directory. ``target`` (the HF model) is needed when embeddings are shared with it."""
        return checkpoint.load_pretrained(cls, path, target=target, device=device, dtype=dtype)
