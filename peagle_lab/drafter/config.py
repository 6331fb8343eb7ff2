"""The drafter's configuration: :class:`PEagleConfig` (shape, draft vocabulary, taps, mask token, RoPE, what it was
trained for), built from a target (:meth:`PEagleConfig.from_target`), written to and read from ``config.json`` in
vLLM's eagle3 layout (our own fields under ``"peagle"``), checked field by field (:func:`validate_config_dict`)
and the RoPE description (:func:`normalise_rope_parameters`).

This module is the one reader of a head's ``config.json`` (:func:`read_config_json`, :meth:`PEagleConfig.from_dir`,
:func:`stored_dtype_name`), whatever wrote it (the layouts of :mod:`.layouts`: ours, speculators', the published
heads'), and the one place its name variants are resolved: the mask token id (:data:`MASK_ID_KEYS`,
:func:`mask_token_id_of`) and the tapped layers (:func:`taps_of`; none written: vLLM's default for the target's
layer count, :meth:`PEagleConfig.with_target_taps`). Everything else, the vLLM export and its checks too, takes a
:class:`PEagleConfig`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PeagleError
from ..features.taps import check_tap_layers, default_tap_layers, tap_range_problem
from ..settings import display_path
from .layouts import check_supported, flat_config

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TRAINING_RECORD = "training.json"  # beside them in a head trained here: how it was trained (training/records.py)
EAGLE3_ARCH = "LlamaForCausalLMEagle3"  # the architecture vLLM builds an eagle3 drafter from
# vLLM reads the mask token id under any of these names (the parallel-drafting proposer: dflash_config.mask_token_id,
# mask_token_id, pard_token, ptd_token_id; speculators' peagle mask_token_id becomes pard_token); the head writes
# mask_token_id and ptd_token_id (a config whose names disagree is refused, so the order only decides which name is
# reported first)
MASK_ID_KEYS = ("mask_token_id", "pard_token", "ptd_token_id", "dflash_config.mask_token_id")


def read_config_json(head_dir) -> dict:
    """The ``config.json`` of a head directory (native or exported) as a dict, with one clear error when it is
    missing, not JSON or not an object."""
    path = Path(head_dir) / CONFIG
    if not path.is_file():
        raise PeagleError(f"{display_path(head_dir)} is not a head directory (no {CONFIG}). Fix: pass a directory "
                          "written by `peagle-lab train` (or PEagleDrafter.save_pretrained / export_vllm).")
    try:
        d = json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        raise PeagleError(f"{display_path(path)} is not valid JSON ({exc}): the head is damaged. Fix: re-save or "
                          "retrain the head.") from exc
    if not isinstance(d, dict):
        raise PeagleError(f"{display_path(path)} is not a JSON object. Fix: re-save or retrain the head.")
    return d


def stored_dtype_name(head_dir) -> str | None:
    """The dtype name a head directory's weights are stored in (its config.json's ``torch_dtype``; None when the
    config does not say)."""
    return read_config_json(head_dir).get("torch_dtype")


def mask_token_ids(d: dict) -> dict:
    """``{name: id}`` for every one of :data:`MASK_ID_KEYS` that is set in a config dict (a dotted name is a field
    of the object named before the dot)."""
    out = {}
    for key in MASK_ID_KEYS:
        outer, _, inner = key.rpartition(".")
        holder = d.get(outer) if outer else d
        if isinstance(holder, dict) and holder.get(inner) is not None:
            out[key] = holder[inner]
    return out


def mask_token_id_of(d: dict):
    """The mask token id of a config dict: the value of the first of :data:`MASK_ID_KEYS` that is set (None when
    none is; its type is checked by :func:`validate_config_dict`)."""
    return next(iter(mask_token_ids(d).values()), None)


def taps_of(d: dict) -> list[int] | None:
    """The tapped target layers of a config dict: ``eagle_aux_hidden_state_layer_ids`` at the top level, else
    under ``eagle_config`` (vLLM's fallback); None when neither is set. The values are as written (their type is
    checked by :func:`validate_config_dict` and the callers)."""
    taps = _taps_as_written(d)
    return None if taps is None else list(taps)


def _taps_as_written(d: dict):
    # the value under either name, unchecked (validate_config_dict checks it)
    return d.get("eagle_aux_hidden_state_layer_ids") or (d.get("eagle_config") or {}).get(
        "eagle_aux_hidden_state_layer_ids")

# peagle.<this>: the target_identity of the target a head was trained on; heads that store it under
# OLD_TARGET_IDENTITY_FIELD are read the same (:meth:`PEagleConfig.target_record`)
TARGET_IDENTITY_FIELD = "target_identity"
OLD_TARGET_IDENTITY_FIELD = "target_fingerprint"

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
    # () : none written in config.json: vLLM's default for the target's layer count (:meth:`with_target_taps`)
    aux_hidden_state_layer_ids: tuple[int, ...] = ()
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
    # vLLM's norm_before_residual: layer 0's residual is hidden_norm(hidden) instead of hidden
    norm_before_residual: bool = False
    # the target's RoPE (transformers' / vLLM's ``rope_parameters``: rope_type, rope_theta, factor, ...); its
    # rope_theta, when given, is the one used (as in transformers). None (a config.json without the field): plain
    # RoPE with ``rope_theta``
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
            # vLLM's Eagle3LlamaForCausalLM sizes mask_hidden and the first layer from hidden_size: keep them equal.
            raise PeagleError(
                f"drafter hidden_size {self.hidden_size} != target hidden size {self.target_hidden_size}: "
                "vLLM needs them equal. Fix: build the drafter with the target's hidden size."
            )

    @property
    def num_taps(self) -> int:
        """How many target states ``fc`` reads: the taps given, else vLLM's three."""
        return len(self.aux_hidden_state_layer_ids) or 3

    def with_target_taps(self, num_layers: int) -> "PEagleConfig":
        """This config with its taps set: as written, else (none written) vLLM's default for a target of
        ``num_layers`` layers (:func:`~peagle_lab.features.taps.default_tap_layers`: 2, L//2, L-3)."""
        if not self.aux_hidden_state_layer_ids:
            self.aux_hidden_state_layer_ids = tuple(default_tap_layers(num_layers))
        return self

    def llama_config(self, rope_parameters: dict | None = None):
        """A transformers ``LlamaConfig`` of the head's shape (hidden size, heads, MLP, norms, ``rope_parameters``):
        what transformers' Llama modules (``LlamaRMSNorm``, ``LlamaMLP``, ``LlamaRotaryEmbedding``) are built from.
        ``rope_parameters`` replaces the head's own (a copy is taken: transformers may fill fields in)."""
        import copy

        from transformers import LlamaConfig  # lazy: the config module itself needs no transformers

        from huggingface_hub.errors import StrictDataclassError

        eps = self.rms_norm_eps
        try:  # an integer epsilon (1 written for 1.0) is a float to transformers' strict config
            return LlamaConfig(hidden_size=self.hidden_size, num_attention_heads=self.num_attention_heads,
                               num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
                               intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
                               num_hidden_layers=self.num_hidden_layers,
                               rms_norm_eps=float(eps) if type(eps) is int else eps,
                               max_position_embeddings=self.max_position_embeddings, hidden_act="silu",
                               mlp_bias=False, rope_parameters=copy.deepcopy(rope_parameters or self.rope_parameters))
        except (StrictDataclassError, ValueError, TypeError) as exc:
            raise PeagleError(f"The head's config has values transformers' Llama layers refuse ({exc}). Fix: correct "
                              "the head's config.json (or retrain the head with `peagle-lab train`).") from exc

    @classmethod
    def from_target(cls, target_config, *, num_hidden_layers=1, draft_vocab_size=None, aux_layer_ids=None,
                    mask_token_id=0, **kw) -> "PEagleConfig":
        """A drafter shaped like the target (same hidden size, heads and rope)."""
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

    def target_record(self) -> dict:
        """What the head records of the target it was trained on, as :func:`~peagle_lab.features.identity.
        recorded_target_problem` reads it: ``{"target_identity": ...}`` from ``peagle.target_identity`` (a head
        that names it ``peagle.target_fingerprint`` is read the same), or ``{}`` when it records none."""
        value = self.extra.get(TARGET_IDENTITY_FIELD) or self.extra.get(OLD_TARGET_IDENTITY_FIELD)
        return {"target_identity": value} if value else {}

    def target_problems(self, target_config) -> list[str]:
        """The one rule of "this head fits this target": why this head cannot read the target whose config is
        ``target_config`` (transformers' config, or anything with its ``vocab_size``, ``hidden_size`` and
        ``num_hidden_layers``): vocabulary, hidden size, tapped layers (empty: it fits)."""
        problems = []
        if target_config.vocab_size != self.vocab_size:
            problems.append(f"vocabulary {self.vocab_size} (head) vs {target_config.vocab_size} (target)")
        if target_config.hidden_size != self.target_hidden_size:
            problems.append(f"hidden size {self.target_hidden_size} (head) vs {target_config.hidden_size} (target)")
        layers = target_config.num_hidden_layers
        taps = tap_range_problem(self.aux_hidden_state_layer_ids or default_tap_layers(layers), layers)
        return problems + ([taps] if taps else [])

    # ----- config.json (vLLM eagle3 layout + our fields under "peagle") -----
    def to_json_dict(self, torch_dtype: str | None = None) -> dict:
        """The head's ``config.json``; ``torch_dtype``: the dtype name its weights are stored in, written last."""
        d = {
            "architectures": [EAGLE3_ARCH],
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
            "eagle_aux_hidden_state_layer_ids": list(self.aux_hidden_state_layer_ids) or None,
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
        if self.norm_before_residual:
            d["norm_before_residual"] = True
        if torch_dtype is not None:
            d["torch_dtype"] = torch_dtype
        return {k: v for k, v in d.items() if v is not None}

    @classmethod
    def from_dir(cls, head_dir) -> "PEagleConfig":
        """The config of a head directory (its ``config.json``, checked field by field)."""
        return cls.from_json_dict(read_config_json(head_dir))

    @classmethod
    def from_json_dict(cls, d: dict) -> "PEagleConfig":
        """The config of a config.json dict in any of the layouts of :mod:`.layouts` (checked field by field; what
        this drafter does not compute is refused)."""
        d = flat_config(d) if isinstance(d, dict) else d
        validate_config_dict(d)
        check_supported(d)
        d = {k: v for k, v in d.items() if v is not None}  # an explicit null means: the default
        try:
            p = dict(d.get("peagle", {}))
            taps = taps_of(d)
            mode, mask_id = _mode_and_mask_id(d, p)
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
                aux_hidden_state_layer_ids=tuple(taps or ()),
                mask_token_id=mask_id,
                rms_norm_eps=d.get("rms_norm_eps", 1e-5),
                rope_theta=d.get("rope_theta", (rope or {}).get("rope_theta", 10000.0)),
                max_position_embeddings=d.get("max_position_embeddings", 8192),
                rope_parameters=rope,
                mode=mode,
                num_speculative_tokens=p.pop("num_speculative_tokens", 8),
                embed_shared_with_target=p.pop("embed_shared_with_target", False),
                target=p.pop("target", ""),
                extra=p,
                norm_before_residual=bool(d.get("norm_before_residual", False)),
            )
        except KeyError as exc:
            raise PeagleError(f"Drafter config.json lacks the field {exc}: not a P-EAGLE/EAGLE-3 head config. {_FIX}"
                              ) from exc


def _mode_and_mask_id(d: dict, p: dict) -> tuple[str, int]:
    """The drafting mode a head was trained for (``peagle.mode``; a head that does not say: parallel when it has a
    mask token, else sequential, an EAGLE-3 head) and its mask token id (0, unused, for an EAGLE-3 head without
    one). Pops ``mode`` from ``p``; a parallel head without a mask token is refused."""
    mask_id = mask_token_id_of(d)
    mode = p.pop("mode", "parallel" if mask_id is not None else "sequential")
    if mask_id is None and mode == "parallel":
        raise PeagleError("config.json has no mask token id (" + " / ".join(MASK_ID_KEYS) + "). Fix: add "
                          "\"mask_token_id\": <id> to config.json.")
    return mode, 0 if mask_id is None else mask_id


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
    ids = mask_token_ids(d)  # the mask token id under each of its names
    for name, v in ids.items():
        if not isinstance(v, int) or isinstance(v, bool):
            raise PeagleError(f"config.json field {name!r} must be an integer token id, got {v!r}. {_FIX}")
    if len(set(ids.values())) > 1:
        raise PeagleError(f"config.json: the mask token ids disagree ({ids}): a head is trained with one. {_FIX}")
    taps = _taps_as_written(d)
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
    llama3 / yarn / longrope (default: ``max_position_embeddings``). ``None`` (a config.json without the field)
    is plain RoPE with ``rope_theta``."""
    if params is None:
        params = {"rope_theta": rope_theta}
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
