"""The P-EAGLE drafter network: an EAGLE-3 head that can also draft K tokens in ONE forward pass.

It computes exactly what vLLM's ``Eagle3LlamaForCausalLM`` (vllm/model_executor/models/llama_eagle3.py in the
vLLM source) computes, so a head trained here serves unchanged in vLLM:

* target features: three tapped residual streams, concatenated (3H), ``fc`` -> H;
* layer 0 (``midlayer``): ``attn(cat[input_layernorm(emb), hidden_norm(h)])`` with residual ``h``, then MLP;
* later layers (``layers.1``...): ordinary Llama layers on (hidden, residual);
* ``prenorm = hidden + residual``; logits = ``lm_head(norm(prenorm))`` over the draft vocabulary; ``d2t`` maps
  draft ids to target ids (:mod:`peagle_lab.drafter.vocab`).

Parallel drafting (P-EAGLE): after the last real slot come K-1 slots with the mask token embedding and the
hidden state ``fc(mask_hidden)`` at positions ``start + j``; ordinary causal attention. Sequential drafting
(EAGLE-3): each further step feeds the drafted token and the previous step's ``prenorm``.

The norms, the MLP and the rotary tables are transformers' Llama modules (``LlamaRMSNorm``, ``LlamaMLP``,
``LlamaRotaryEmbedding``); only the attention (its 2H-input first layer, the head's own KV cache) is written here.
The configuration lives in :mod:`.config`, the checkpoint format in :mod:`.checkpoint`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import PeagleError
from ..kv_cache import DrafterCache
from .vocab import d2t_t2d, draft_ids_from_d2t, unset_maps
from . import checkpoint
from .config import _FIX, PEagleConfig


# --------------------------------------------------------------------------------------------- layers
def _llama():
    """transformers' Llama modules (the target's): same parameter names (``weight``; ``gate_proj``/``up_proj``/
    ``down_proj``), so the state-dict keys, the shipped heads and the vLLM export are unchanged. Imported when a
    head is built, not with the package: importing them loads torch's compiler stack, which sets
    ``TORCHINDUCTOR_CACHE_DIR``, and ``import peagle_lab`` sets nothing."""
    from transformers.models.llama import modeling_llama

    return modeling_llama


def RMSNorm(hidden_size: int, eps: float = 1e-6) -> nn.Module:
    """transformers' ``LlamaRMSNorm``."""
    return _llama().LlamaRMSNorm(hidden_size, eps)


def MLP(config) -> nn.Module:
    """transformers' ``LlamaMLP`` for a ``LlamaConfig`` (:meth:`PEagleConfig.llama_config`)."""
    return _llama().LlamaMLP(config)


def _rotary_embedding(lcfg) -> nn.Module:
    return _llama().LlamaRotaryEmbedding(lcfg)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype):
    """Plain (rope_type default) Llama rotary tables for integer positions of shape (B, T): transformers'
    ``LlamaRotaryEmbedding`` with ``rope_theta`` ``theta``. Returns cos, sin of shape (B, 1, T, head_dim)."""
    lcfg = PEagleConfig(hidden_size=head_dim, num_attention_heads=1, num_key_value_heads=1, intermediate_size=1,
                        vocab_size=1, head_dim=head_dim, rope_theta=theta).llama_config()
    cos, sin = _rotary_embedding(lcfg)(torch.empty(0, device=positions.device, dtype=dtype), positions)
    return cos[:, None], sin[:, None]


class RotaryTables:
    """The head's rotary cos/sin for integer positions, from its ``rope_parameters`` (the target's).

    transformers' own ``LlamaRotaryEmbedding`` for a Llama config with the head's shape and these parameters, for
    every ``rope_type`` (default, llama3, yarn, linear, dynamic, longrope, ...): the inverse frequencies and attention
    scaling the target uses and vLLM builds from the exported config. Not an ``nn.Module`` of the head: its tables
    stay float32 when the head is cast to bf16 and it adds nothing to the checkpoint; it follows the positions'
    device."""

    def __init__(self, cfg: "PEagleConfig"):
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        self.params = dict(cfg.rope_parameters)
        self.hf = self._transformers_rotary(cfg)

    def _transformers_rotary(self, cfg):
        try:
            with torch.device("cpu"):  # real tables even when the head is built on the meta device
                rotary = _rotary_embedding(cfg.llama_config(self.params))
        except (KeyError, ValueError, TypeError) as exc:
            raise PeagleError(f"rope_parameters {self.params} cannot build the rotary embedding ({exc!r}): a field "
                              f"that rope_type {self.params['rope_type']!r} needs is missing or wrong. {_FIX}") from exc
        if rotary.inv_freq.numel() != self.head_dim // 2:
            raise PeagleError(f"rope_parameters {self.params} rotate {2 * rotary.inv_freq.numel()} of "
                              f"{self.head_dim} head dimensions: the head supports full RoPE only.")
        return rotary

    def __call__(self, positions: torch.Tensor, dtype):
        """(B, T) positions -> cos, sin of shape (B, 1, T, head_dim) in ``dtype``."""
        if self.hf.inv_freq.device != positions.device:
            self.hf.to(positions.device)
        cos, sin = self.hf(torch.empty(0, device=positions.device, dtype=dtype), positions)
        return cos[:, None], sin[:, None]


class Attention(nn.Module):
    """Llama attention over an ``in_dim`` input (2H in EAGLE-3's first layer: [embeddings, hidden]) with the head's
    own KV cache; the rotation is transformers' ``apply_rotary_pos_emb``."""

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
        q, k = _llama().apply_rotary_pos_emb(q, k, cos[:, 0], sin[:, 0])  # (B, 1, T, hd) tables -> (B, T, hd)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if self.nkv != self.nh:
            rep = self.nh // self.nkv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.nh * self.hd))


class DecoderLayer(nn.Module):
    """``first=True``: EAGLE-3's midlayer (2H attention input, hidden_norm); else a plain Llama layer."""

    def __init__(self, cfg: PEagleConfig, first: bool):
        super().__init__()
        H = cfg.hidden_size
        self.first = first
        self.norm_before_residual = cfg.norm_before_residual  # vLLM's option: layer 0's residual is normed
        self.input_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        if first:
            self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, 2 * H if first else H)
        self.post_attention_layernorm = RMSNorm(H, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.llama_config())

    def forward(self, embeds, hidden, residual, cos, sin, mask, cache, layer):
        if self.first:
            normed = self.hidden_norm(hidden)
            residual = normed if self.norm_before_residual else hidden
            x = torch.cat([self.input_layernorm(embeds), normed], dim=-1)
        else:
            residual = hidden + residual
            x = self.input_layernorm(residual)
        residual = self.self_attn(x, cos, sin, mask, cache, layer) + residual
        hidden = self.mlp(self.post_attention_layernorm(residual))
        return hidden, residual


# --------------------------------------------------------------------------------------------- model
class PEagleDrafter(nn.Module):
    """The head: ``forward`` over (tokens, fused target hidden states, positions); checkpoint methods delegate to
    :mod:`.checkpoint`."""

    def __init__(self, cfg: PEagleConfig):
        super().__init__()
        self.config = cfg
        self.rotary = RotaryTables(cfg)  # first: bad rope_parameters are named before the layers need them
        H = cfg.hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, H)
        self.fc = nn.Linear(cfg.num_taps * cfg.target_hidden_size, H, bias=False)
        self.mask_hidden = nn.Parameter(torch.zeros(1, 1, cfg.num_taps * cfg.target_hidden_size))
        self.midlayer = DecoderLayer(cfg, first=True)
        self.layers = nn.ModuleDict({str(i): DecoderLayer(cfg, first=False) for i in range(1, cfg.num_hidden_layers)})
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        d2t, t2d = unset_maps(cfg.draft_vocab_size, cfg.vocab_size)
        self.register_buffer("d2t", d2t)
        self.register_buffer("t2d", t2d)
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
        problems = self.config.target_problems(tcfg)
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

    def one_pass_logits(self, context_ids, taps: torch.Tensor, k: int) -> torch.Tensor:
        """The draft-vocab logits (n + k - 1, Vd) of one parallel drafting pass without a cache: context slots
        ``0..n-1`` (token ``context_ids[i]`` with the fused tap ``taps[i]``), then ``k - 1`` mask slots (the mask
        token with ``fc(mask_hidden)``); the drafts are the argmax of the last ``k`` rows. The inputs may live on
        any device and in any dtype: they are moved to the head's (a CPU tensor fed to a head on CUDA fails)."""
        w = self.fc.weight
        ids = torch.as_tensor(context_ids, dtype=torch.long).to(w.device).view(-1)
        n = ids.numel()
        ids = torch.cat([ids, ids.new_full((k - 1,), self.config.mask_token_id)])[None]
        hidden = self.fuse(taps.to(w.device, w.dtype).view(n, -1))
        hidden = torch.cat([hidden, self.mask_slot_hidden()[0].expand(k - 1, -1)])[None]
        logits, _ = self(ids, hidden, torch.arange(n + k - 1, device=w.device)[None])
        return logits[0]

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
