"""The P-EAGLE drafter: an EAGLE-3 head that can also draft K tokens in ONE forward pass.

It computes exactly what vLLM's ``Eagle3LlamaForCausalLM`` computes (see REFERENCE.md), so a head trained
here serves unchanged in vLLM:

* target features: three tapped residual streams, concatenated (3H), ``fc`` -> H;
* layer 0 (``midlayer``): ``attn(cat[input_layernorm(emb), hidden_norm(h)])`` with residual ``h``, then MLP;
* later layers (``layers.1``...): ordinary Llama layers on (hidden, residual);
* ``prenorm = hidden + residual``; logits = ``lm_head(norm(prenorm))`` over the draft vocabulary; ``d2t`` maps
  draft ids to target ids.

Parallel drafting (P-EAGLE): after the last real slot come K-1 slots with the mask token embedding and the
hidden state ``fc(mask_hidden)`` at positions ``start + j``; ordinary causal attention. Sequential drafting
(EAGLE-3): each further step feeds the drafted token and the previous step's ``prenorm``.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .errors import PeagleError

WEIGHTS = "model.safetensors"
CONFIG = "config.json"


@dataclass
class PEagleConfig:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    num_hidden_layers: int = 1
    head_dim: int | None = None
    draft_vocab_size: int | None = None  # None: full target vocabulary
    target_hidden_size: int | None = None
    aux_hidden_state_layer_ids: tuple[int, ...] = (2, 15, 27)
    mask_token_id: int = 0
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    # peagle-lab training facts
    mode: str = "parallel"  # what it was trained for: "parallel" (P-EAGLE) or "sequential" (EAGLE-3)
    num_speculative_tokens: int = 8  # K it was trained for
    embed_shared_with_target: bool = True  # all rows but the mask row equal the target's
    target: str = ""
    extra: dict = field(default_factory=dict)
    # the target's RoPE (transformers' / vLLM's ``rope_parameters``: rope_type, rope_theta, factor, ...); its
    # rope_theta, when given, is the one used (as in transformers). None (a config.json written before the field
    # was stored): plain RoPE with ``rope_theta``, as ever
    rope_parameters: dict | None = None

    def __post_init__(self):
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        self.rope_parameters = normalise_rope_parameters(self.rope_parameters, self.rope_theta,
                                                         self.max_position_embeddings)
        self.rope_theta = self.rope_parameters["rope_theta"]
        self.draft_vocab_size = self.draft_vocab_size or self.vocab_size
        self.target_hidden_size = self.target_hidden_size or self.hidden_size
        self.aux_hidden_state_layer_ids = tuple(int(i) for i in self.aux_hidden_state_layer_ids)
        if self.mode not in ("parallel", "sequential"):
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise PeagleError(f"mask_token_id {self.mask_token_id} is outside the vocabulary (size {self.vocab_size})")
        if self.hidden_size != self.target_hidden_size:
            # vLLM sizes mask_hidden and the first layer from hidden_size; keep them equal (REFERENCE.md).
            raise PeagleError(
                f"drafter hidden_size {self.hidden_size} != target hidden size {self.target_hidden_size}: "
                "vLLM needs them equal. Fix: build the drafter with the target's hidden size."
            )

    @property
    def num_taps(self) -> int:
        return len(self.aux_hidden_state_layer_ids)

    @classmethod
    def from_target(cls, target_config, *, num_hidden_layers=1, draft_vocab_size=None, aux_layer_ids=None,
                    mask_token_id=0, **kw) -> "PEagleConfig":
        """A drafter shaped like the target (same hidden size, heads and rope)."""
        from .taps import check_tap_layers, default_tap_layers

        L = target_config.num_hidden_layers
        taps = check_tap_layers(aux_layer_ids or default_tap_layers(L), L)
        rope = target_rope_parameters(target_config)
        theta = rope.get("rope_theta", getattr(target_config, "rope_theta", 10000.0))
        return cls(
            hidden_size=target_config.hidden_size,
            num_attention_heads=target_config.num_attention_heads,
            num_key_value_heads=getattr(target_config, "num_key_value_heads", target_config.num_attention_heads),
            head_dim=getattr(target_config, "head_dim", None),
            intermediate_size=target_config.intermediate_size,
            vocab_size=target_config.vocab_size,
            num_hidden_layers=num_hidden_layers,
            draft_vocab_size=draft_vocab_size,
            aux_hidden_state_layer_ids=taps,
            mask_token_id=mask_token_id,
            rms_norm_eps=target_config.rms_norm_eps,
            rope_theta=theta,
            max_position_embeddings=getattr(target_config, "max_position_embeddings", 8192),
            rope_parameters={**rope, "rope_theta": theta},
            **kw,
        )

    # ----- config.json (vLLM eagle3 layout + our fields under "peagle") -----
    def to_json_dict(self) -> dict:
        return {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": dict(self.rope_parameters),  # what vLLM builds the head's rotary embedding from
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "eagle_aux_hidden_state_layer_ids": list(self.aux_hidden_state_layer_ids),
            "mask_token_id": self.mask_token_id,
            "ptd_token_id": self.mask_token_id,
            "tie_word_embeddings": False,
            "peagle": {
                "mode": self.mode,
                "num_speculative_tokens": self.num_speculative_tokens,
                "embed_shared_with_target": self.embed_shared_with_target,
                "target": self.target,
                **self.extra,
            },
        }

    @classmethod
    def from_json_dict(cls, d: dict) -> "PEagleConfig":
        validate_config_dict(d)
        d = {k: v for k, v in d.items() if v is not None}  # an explicit null means: the default
        try:
            p = dict(d.get("peagle", {}))
            taps = d.get("eagle_aux_hidden_state_layer_ids") or (d.get("eagle_config") or {}).get(
                "eagle_aux_hidden_state_layer_ids")
            mask_id = d.get("mask_token_id", d.get("ptd_token_id", d.get("pard_token")))
            if mask_id is None:
                raise PeagleError("config.json has no mask token id (mask_token_id / ptd_token_id / pard_token). "
                                  "Fix: add \"mask_token_id\": <id> to config.json.")
            rope = d.get("rope_parameters") or d.get("rope_scaling") or None  # rope_scaling: the older HF name
            return cls(
                hidden_size=d["hidden_size"],
                num_attention_heads=d["num_attention_heads"],
                num_key_value_heads=d.get("num_key_value_heads", d["num_attention_heads"]),
                head_dim=d.get("head_dim"),
                intermediate_size=d["intermediate_size"],
                vocab_size=d["vocab_size"],
                num_hidden_layers=d.get("num_hidden_layers", 1),
                draft_vocab_size=d.get("draft_vocab_size"),
                target_hidden_size=d.get("target_hidden_size"),
                aux_hidden_state_layer_ids=tuple(taps) if taps else (2, 15, 27),
                mask_token_id=mask_id,
                rms_norm_eps=d.get("rms_norm_eps", 1e-5),
                rope_theta=d.get("rope_theta", (rope or {}).get("rope_theta", 10000.0)),
                max_position_embeddings=d.get("max_position_embeddings", 8192),
                rope_parameters=rope,
                mode=p.pop("mode", "parallel"),
                num_speculative_tokens=p.pop("num_speculative_tokens", 8),
                embed_shared_with_target=p.pop("embed_shared_with_target", False),
                target=p.pop("target", ""),
                extra=p,
            )
        except KeyError as exc:
            raise PeagleError(f"Drafter config.json lacks the field {exc}: not a P-EAGLE/EAGLE-3 head config.") from exc


_INT_FIELDS = {"hidden_size": True, "num_attention_heads": True, "intermediate_size": True, "vocab_size": True,
               "num_key_value_heads": False, "head_dim": False, "num_hidden_layers": False,
               "draft_vocab_size": False, "target_hidden_size": False, "max_position_embeddings": False}
_FIX = "Fix: re-save the head with PEagleDrafter.save_pretrained / `peagle-lab train`, or correct config.json."


def validate_config_dict(d) -> None:
    """Check a drafter config.json field by field (types, required fields, ranges, consistency); raise a
    ``PeagleError`` naming the field, what was expected and the fix."""
    if not isinstance(d, dict) or "hidden_size" not in d or "vocab_size" not in d:
        raise PeagleError("config.json is not a drafter config (no hidden_size / vocab_size): it is not a "
                          f"P-EAGLE / EAGLE-3 head. {_FIX}")
    for name, required in _INT_FIELDS.items():
        v = d.get(name)
        if v is None:
            if required:
                raise PeagleError(f"config.json lacks the required field {name!r} (an integer >= 1). {_FIX}")
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PeagleError(f"config.json field {name!r} must be an integer >= 1, got {v!r} "
                              f"({type(v).__name__}). {_FIX}")
    for name in ("rms_norm_eps", "rope_theta"):
        v = d.get(name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0):
            raise PeagleError(f"config.json field {name!r} must be a positive number, got {v!r}. {_FIX}")
    mask = d.get("mask_token_id", d.get("ptd_token_id", d.get("pard_token")))
    if mask is not None and (not isinstance(mask, int) or isinstance(mask, bool)):
        raise PeagleError(f"config.json field 'mask_token_id' must be an integer token id, got {mask!r}. {_FIX}")
    taps = d.get("eagle_aux_hidden_state_layer_ids") or (d.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")
    if taps is not None and (not isinstance(taps, list) or not taps
                             or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in taps)):
        raise PeagleError(f"config.json field 'eagle_aux_hidden_state_layer_ids' must be a list of layer ids >= 0, "
                          f"got {taps!r}. {_FIX}")
    hd = d.get("head_dim") or (d["hidden_size"] // d["num_attention_heads"])
    if hd % 2:
        raise PeagleError(f"config.json: head_dim {hd} must be even (rotary embeddings rotate pairs of dimensions). "
                          f"{_FIX}")
    heads, kv = d["num_attention_heads"], d.get("num_key_value_heads") or d["num_attention_heads"]
    if heads % kv:
        raise PeagleError(f"config.json: num_key_value_heads {kv} must divide num_attention_heads {heads}. {_FIX}")
    if d.get("head_dim") is None and d["hidden_size"] % heads:
        raise PeagleError(f"config.json: num_attention_heads {heads} must divide hidden_size {d['hidden_size']} "
                          f"(or give head_dim). {_FIX}")
    dv = d.get("draft_vocab_size")
    if dv is not None and dv > d["vocab_size"]:
        raise PeagleError(f"config.json: draft_vocab_size {dv} exceeds vocab_size {d['vocab_size']}. {_FIX}")
    _check_rope_dict(d)
    p = d.get("peagle", {})
    if not isinstance(p, dict):
        raise PeagleError(f"config.json field 'peagle' must be an object, got {type(p).__name__}. {_FIX}")
    if "mode" in p and p["mode"] not in ("parallel", "sequential"):
        raise PeagleError(f"config.json field 'peagle.mode' must be 'parallel' or 'sequential', got {p['mode']!r}. "
                          f"{_FIX}")
    k = p.get("num_speculative_tokens")
    if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise PeagleError(f"config.json field 'peagle.num_speculative_tokens' must be an integer >= 1, got {k!r}. "
                          f"{_FIX}")


# --------------------------------------------------------------------------------------------- RoPE parameters
def target_rope_parameters(target_config) -> dict:
    """The target's RoPE description: ``rope_parameters`` (transformers >= 5), else the older ``rope_scaling``
    (with ``rope_theta`` beside it), else ``{}`` (plain RoPE)."""
    rope = getattr(target_config, "rope_parameters", None) or getattr(target_config, "rope_scaling", None) or {}
    return dict(rope)


def supported_rope_types() -> tuple[str, ...]:
    """``default`` and every type transformers computes (``ROPE_INIT_FUNCTIONS``: linear, dynamic, yarn, longrope,
    llama3, ...)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    return ("default", *ROPE_INIT_FUNCTIONS)


def _flat_rope(params: dict) -> dict:
    # per-layer-type parameters ({"full_attention": {...}, "sliding_attention": {...}}): the head attends globally
    return params["full_attention"] if isinstance(params.get("full_attention"), dict) else params


def normalise_rope_parameters(params, rope_theta: float, max_position_embeddings: int) -> dict:
    """One flat ``rope_parameters`` dict as transformers standardises it: ``rope_type`` (``type`` is the older
    name; default ``default``), ``rope_theta`` (default: ``rope_theta``), ``original_max_position_embeddings`` for
    llama3 / yarn / longrope (default: ``max_position_embeddings``). ``None`` (a config.json from before the field)
    is plain RoPE with ``rope_theta``: the same tables as ever."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise PeagleError(f"rope_parameters must be a dict (rope_type, rope_theta, factor, ...), got {params!r}. "
                          f"{_FIX}")
    p = dict(_flat_rope(params))
    kind = p.pop("type", None)
    p["rope_type"] = p.get("rope_type") or kind or "default"
    if p.get("rope_theta") is None:
        p["rope_theta"] = rope_theta
    if p["rope_type"] not in supported_rope_types():
        raise PeagleError(f"rope_type {p['rope_type']!r} is not one transformers computes "
                          f"({', '.join(supported_rope_types())}). Fix: use a target with a supported RoPE.")
    if float(p.get("partial_rotary_factor") or 1.0) != 1.0:
        raise PeagleError(f"partial_rotary_factor {p['partial_rotary_factor']} is not supported: the head (like "
                          "vLLM's Llama EAGLE-3 head) rotates whole attention heads. Fix: use a target with full RoPE.")
    if p["rope_type"] in ("llama3", "yarn", "longrope"):
        p.setdefault("original_max_position_embeddings", max_position_embeddings)
    return p


def _check_rope_dict(d: dict) -> None:
    rope = d.get("rope_parameters") or d.get("rope_scaling")  # what from_json_dict reads
    if rope is None:
        return
    if not isinstance(rope, dict):
        raise PeagleError(f"config.json field 'rope_parameters' must be an object (rope_type, rope_theta, ...), got "
                          f"{rope!r}. {_FIX}")
    flat = _flat_rope(rope)
    kind = flat.get("rope_type", flat.get("type")) or "default"
    if kind not in supported_rope_types():
        raise PeagleError(f"config.json field 'rope_parameters.rope_type' {kind!r} is not one of "
                          f"{supported_rope_types()}. {_FIX}")
    theta, top = flat.get("rope_theta"), d.get("rope_theta")
    if theta is not None and (not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0):
        raise PeagleError(f"config.json field 'rope_parameters.rope_theta' must be a positive number, got {theta!r}. "
                          f"{_FIX}")
    if theta is not None and isinstance(top, (int, float)) and float(top) != float(theta):
        raise PeagleError(f"config.json: rope_theta {top} disagrees with rope_parameters.rope_theta {theta} "
                          f"(transformers and vLLM use the latter). {_FIX}")


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
        import copy

        from transformers import LlamaConfig
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
        self.d2t.copy_(draft_ids - torch.arange(draft_ids.numel()))
        self.t2d.zero_()
        self.t2d[draft_ids] = True

    def draft_to_target_ids(self) -> torch.Tensor:
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

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

    # ---- checkpoint ----
    def export_state_dict(self) -> dict[str, torch.Tensor]:
        """Weights under vLLM's eagle3 names (see CONVENTIONS.md)."""
        sd = {k: v for k, v in self.state_dict().items()}
        out = {}
        for k, v in sd.items():
            if k == "embed_tokens.weight" and self.config.embed_shared_with_target:
                out["mask_embedding"] = v[self.config.mask_token_id].clone()
                continue
            if k == "t2d" or k == "d2t":
                if self.config.draft_vocab_size == self.config.vocab_size:
                    continue
            out[k] = v
        return out

    def save_pretrained(self, path, dtype: torch.dtype | None = torch.bfloat16):
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, v in self.export_state_dict().items():
            v = v.detach().cpu()
            if dtype is not None and v.is_floating_point():
                v = v.to(dtype)
            tensors[k] = v.contiguous()
        cfg = self.config.to_json_dict()
        cfg["torch_dtype"] = str(dtype or torch.float32).replace("torch.", "")
        _atomic_write(path / WEIGHTS, lambda f: save_file(tensors, f, metadata={"format": "pt"}))
        _atomic_write(path / CONFIG, lambda f: Path(f).write_text(json.dumps(cfg, indent=2)))
        return path

    @classmethod
    def from_pretrained(cls, path, target=None, device=None, dtype=torch.float32) -> "PEagleDrafter":
        """Load a head directory. ``target`` (the HF model) is needed when embeddings are shared with it."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / CONFIG).exists() or not (path / WEIGHTS).exists():
            raise PeagleError(f"{path} is not a drafter checkpoint: it needs {CONFIG} and {WEIGHTS}. "
                              "Fix: point at a directory written by PEagleDrafter.save_pretrained / `peagle-lab train`.")
        try:
            cfg = PEagleConfig.from_json_dict(json.loads((path / CONFIG).read_text()))
        except json.JSONDecodeError as exc:
            raise PeagleError(f"{path / CONFIG} is not valid JSON ({exc}): the checkpoint is corrupt.") from exc
        try:
            sd = load_file(str(path / WEIGHTS))
        except (SafetensorError, OSError, ValueError) as exc:
            raise PeagleError(f"{path / WEIGHTS} cannot be read ({exc}): the checkpoint is corrupt or truncated. "
                              "Fix: re-export or retrain the head.") from exc
        model = cls(cfg)
        if target is not None:
            model.check_compatible(target)
        expected = model.state_dict()
        if "mask_embedding" in sd:
            if target is None:
                raise PeagleError(f"{path} shares token embeddings with its target: pass target=... to load it.")
            emb = target.get_input_embeddings().weight.detach().cpu().float().clone()
            emb[cfg.mask_token_id] = sd.pop("mask_embedding").float()
            sd["embed_tokens.weight"] = emb
        if "d2t" not in sd and cfg.draft_vocab_size == cfg.vocab_size:
            sd["d2t"] = expected["d2t"]
            sd["t2d"] = expected["t2d"]
        if "d2t" in sd and tuple(sd["d2t"].shape) == tuple(expected["d2t"].shape):
            sd.setdefault("t2d", _t2d_from_d2t(sd["d2t"], cfg))
        else:
            sd.setdefault("t2d", expected["t2d"])
        missing = sorted(set(expected) - set(sd))
        unexpected = sorted(set(sd) - set(expected))
        wrong = sorted(k for k in set(expected) & set(sd) if tuple(sd[k].shape) != tuple(expected[k].shape))
        if missing or unexpected or wrong:
            detail = []
            if missing:
                detail.append(f"missing tensors {missing}")
            if unexpected:
                detail.append(f"unexpected tensors {unexpected}")
            if wrong:
                detail.append("misshaped tensors " + ", ".join(
                    f"{k}: {tuple(sd[k].shape)} (expected {tuple(expected[k].shape)})" for k in wrong))
            raise PeagleError(f"Checkpoint {path} does not match its config: " + "; ".join(detail) +
                              ". Fix: the config.json and model.safetensors come from different heads, or the file"
                              " is damaged; re-save the head.")
        model.load_state_dict({k: v.to(expected[k].dtype) for k, v in sd.items()})
        return model.to(device=device, dtype=dtype).eval() if device else model.to(dtype=dtype).eval()


def _t2d_from_d2t(d2t, cfg):
    ids = torch.arange(cfg.draft_vocab_size) + d2t
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab_size):
        raise PeagleError(f"d2t maps draft ids outside the target vocabulary (0..{cfg.vocab_size - 1}): the head is "
                          f"damaged or belongs to another target. {_FIX}")
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return t2d


def _atomic_write(final: Path, write):
    from .atomic import atomic_write

    atomic_write(final, write)


def check_k(k: int, cfg: PEagleConfig, limit: int = 64, warn: bool = True) -> int:
    """Validate K: an int in [1, limit]; warn (when ``warn``) when above what the head was trained for."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PeagleError(f"num_speculative_tokens K must be an integer >= 1, got {k!r}. Fix: use K in 1..{limit}.")
    if k > limit:
        raise PeagleError(f"K={k} is out of range (max {limit}).")
    if warn and k > cfg.num_speculative_tokens:
        warnings.warn(f"K={k} exceeds the K={cfg.num_speculative_tokens} this head was trained for: deeper slots "
                      "were never trained and will rarely be accepted (output stays lossless).", stacklevel=3)
    return k
