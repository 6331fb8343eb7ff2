"""The drafter's checkpoint: a directory with ``config.json`` and ``model.safetensors`` under vLLM's eagle3 names
(docs/checkpoint-format.md), written by :func:`save_pretrained` and read back by :func:`load_pretrained`, which reads
a head in vLLM's eagle3 layout whatever wrote it (:mod:`.layouts`: ``layers.0.`` or ``midlayer.``, ``d2t`` / ``t2d``
or none, the embeddings stored or shared with the target, ``mask_hidden`` for a parallel head).

The tensors and their shapes follow from the config alone (:func:`drafter_shapes`, :func:`state_shapes`), so a head
directory is checked (:func:`check_head_dir`) without building a network. Embeddings shared with the target are
stored as one ``mask_embedding`` row; ``d2t`` / ``t2d`` (the draft-vocabulary maps, :mod:`.vocab`) are stored only
for a reduced draft vocabulary (:func:`_as_stored`). :class:`~.network.PEagleDrafter`'s ``export_state_dict`` /
``save_pretrained`` / ``from_pretrained`` call these functions; this module imports no network."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..atomic import atomic_write, write_json
from ..errors import PeagleError
from .vocab import t2d_from_d2t, unset_maps
from .config import _FIX, CONFIG, TRAINING_RECORD, WEIGHTS, PEagleConfig
from .layouts import canonical_tensors
from ..precision import dtype_name


def drafter_shapes(cfg: PEagleConfig) -> dict[str, tuple[int, ...]]:
    """The Llama drafter's tensors that vLLM builds from the config (``fc``, the layers, ``norm``, ``lm_head``)
    and their shapes."""
    h, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    inter, dv = cfg.intermediate_size, cfg.draft_vocab_size
    shapes = {"fc.weight": (h, cfg.num_taps * cfg.target_hidden_size), "norm.weight": (h,), "lm_head.weight": (dv, h)}
    for i in range(cfg.num_hidden_layers):
        p = "midlayer." if i == 0 else f"layers.{i}."
        qkv_in = 2 * h if i == 0 else h  # the first layer attends over [embeddings, hidden]
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (nh * hd, qkv_in), p + "self_attn.k_proj.weight": (nkv * hd, qkv_in),
            p + "self_attn.v_proj.weight": (nkv * hd, qkv_in), p + "self_attn.o_proj.weight": (h, nh * hd),
            p + "mlp.gate_proj.weight": (inter, h), p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
        })
        if i == 0:
            shapes[p + "hidden_norm.weight"] = (h,)
    return shapes


def state_shapes(cfg: PEagleConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every entry of a :class:`~.network.PEagleDrafter`'s ``state_dict()`` for ``cfg``: the
    drafter's tensors, the embeddings, ``mask_hidden`` (the mask slots' hidden state before ``fc``) and the
    vocabulary maps."""
    return {"embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size), **drafter_shapes(cfg),
            "mask_hidden": (1, 1, cfg.num_taps * cfg.target_hidden_size),
            "d2t": (cfg.draft_vocab_size,), "t2d": (cfg.vocab_size,)}


def _as_stored(cfg: PEagleConfig, state: dict, mask_row) -> dict:
    """The checkpoint's entries of ``state`` (a state dict, or its shapes): embeddings shared with the target become
    their mask row (``mask_row(embeddings)``), the vocabulary maps are left out for the full vocabulary."""
    out = {}
    for k, v in state.items():
        if k == "embed_tokens.weight" and cfg.embed_shared_with_target:
            out["mask_embedding"] = mask_row(v)
        elif k not in ("d2t", "t2d") or cfg.draft_vocab_size != cfg.vocab_size:
            out[k] = v
    return out


def export_state_dict(model) -> dict[str, torch.Tensor]:
    """``model``'s weights under vLLM's eagle3 names: the shared embeddings as their ``mask_embedding`` row, no
    ``d2t`` / ``t2d`` for the full vocabulary."""
    cfg = model.config
    return _as_stored(cfg, model.state_dict(), lambda emb: emb[cfg.mask_token_id].clone())


def save_pretrained(model, path, dtype: torch.dtype | None = torch.bfloat16) -> Path:
    """Write ``model`` to the directory ``path`` (floating tensors in ``dtype``; None: as they are), atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, v in export_state_dict(model).items():
        v = v.detach().cpu()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        tensors[k] = v.contiguous()
    cfg = model.config.to_json_dict(torch_dtype=dtype_name(dtype or torch.float32))
    meta = {"format": "pt", **_shape_record(model.config)}
    atomic_write(path / WEIGHTS, lambda f: save_file(tensors, f, metadata=meta))
    write_json(path / CONFIG, cfg)
    return path


def _shape_record(cfg: PEagleConfig) -> dict[str, str]:
    """What the weights file records of the head that made it (safetensors metadata: strings)."""
    return {"peagle_mode": cfg.mode, "num_hidden_layers": str(cfg.num_hidden_layers)}


def _recorded_shape(path: Path, metadata: dict) -> tuple[dict, str]:
    """The mode and layer count the weights were trained with: from the weights file's metadata, else (heads saved
    before it was recorded) from the head's training.json. ``({}, "")`` when neither says."""
    if metadata.get("peagle_mode"):
        return {"mode": metadata["peagle_mode"], "num_hidden_layers": int(metadata.get("num_hidden_layers", 0))
                or None}, f"{WEIGHTS} (metadata)"
    try:
        rec = json.loads((path / TRAINING_RECORD).read_text()).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return {}, ""
    return {"mode": rec.get("mode"), "num_hidden_layers": rec.get("layers")}, TRAINING_RECORD


def _stored_shapes(path: Path) -> tuple[dict, dict]:
    """``({name: shape}, metadata)`` of a head's weights file, under this package's names
    (:func:`.layouts.canonical_tensors`), read from the safetensors header only."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path / WEIGHTS), "pt") as fh:
            shapes = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
            metadata = fh.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise PeagleError(f"{path / WEIGHTS} cannot be read ({exc}): the checkpoint is corrupt or truncated. "
                          "Fix: re-export or retrain the head.") from None
    return _mask_hidden_as_stored(canonical_tensors(shapes, str(path)), lambda shape, n: (1, 1, n)), metadata


def _mask_hidden_as_stored(stored: dict, reshape) -> dict:
    """``mask_hidden`` stored as (3H,), (1, 3H) or (1, 1, 3H) (vLLM reads any of them: ``view(1, -1)``) becomes
    (1, 1, 3H): ``reshape(value, 3H)``."""
    v = stored.get("mask_hidden")
    shape = tuple(v) if isinstance(v, tuple) else tuple(getattr(v, "shape", ()))
    if v is not None and len(shape) in (1, 2, 3) and all(n == 1 for n in shape[:-1]):
        stored["mask_hidden"] = reshape(v, shape[-1])
    return stored


def _expected_stored(cfg: PEagleConfig) -> tuple[dict, set]:
    """``({name: shape}, optional names)`` of the checkpoint of a head with config ``cfg``: what this package
    writes, where ``d2t`` (full vocabulary), ``t2d``, ``embed_tokens.weight`` (absent: shared with the target, as
    in vLLM) and, for an EAGLE-3 (sequential) head, ``mask_hidden`` may also be absent."""
    expected = _as_stored(cfg, state_shapes(cfg), lambda shape: shape[1:])
    expected.update(d2t=(cfg.draft_vocab_size,), t2d=(cfg.vocab_size,))
    optional = {"t2d"} | ({"d2t"} if cfg.draft_vocab_size == cfg.vocab_size else set())
    if not cfg.embed_shared_with_target:
        optional.add("embed_tokens.weight")
    if cfg.mode == "sequential":
        optional.add("mask_hidden")
    return expected, optional


def check_head_dir(path) -> PEagleConfig:
    """A head directory whose weights match its config, checked without loading a tensor (config.json, the
    safetensors header, training.json): the config is valid; the mode and layer count the weights were trained
    with are the config's; every tensor is there with the shape the config gives it. Returns the config."""
    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise PeagleError(f"{path} is not a drafter checkpoint: it needs {CONFIG} and {WEIGHTS}. "
                          "Fix: point at a directory written by PEagleDrafter.save_pretrained / `peagle-lab train`.")
    cfg = PEagleConfig.from_dir(path)
    shapes, metadata = _stored_shapes(path)
    recorded, source = _recorded_shape(path, metadata)
    for key, flag in (("mode", "peagle.mode"), ("num_hidden_layers", "num_hidden_layers")):
        if recorded.get(key) is not None and recorded[key] != getattr(cfg, key):
            raise PeagleError(f"{path}: config.json says {flag} = {getattr(cfg, key)!r} but its weights were trained "
                              f"with {recorded[key]!r} ({source}): config and weights come from different heads. "
                              f"Fix: put the config.json of those weights back, or point at the right head.")
    expected, optional = _expected_stored(cfg)
    _check_tensors(path, shapes, expected, optional=optional)
    return cfg


def read_tensors(path) -> dict[str, torch.Tensor]:
    """The tensors of a head directory's weights file under this package's names, whatever wrote it
    (:func:`.layouts.canonical_tensors`; ``mask_hidden`` as (1, 1, 3H))."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    try:
        sd = load_file(str(path / WEIGHTS))
    except (SafetensorError, OSError, ValueError) as exc:
        raise PeagleError(f"{path / WEIGHTS} cannot be read ({exc}): the checkpoint is corrupt or truncated. "
                          "Fix: re-export or retrain the head.") from exc
    return _mask_hidden_as_stored(canonical_tensors(sd, str(path)), lambda t, n: t.reshape(1, 1, n))


def load_pretrained(cls, path, target=None, device=None, dtype=torch.float32):
    """Load a head directory as a ``cls`` (:class:`~.network.PEagleDrafter`). ``target`` (the HF model) is needed
    when embeddings are shared with it, and sets the taps of a head whose config names none (vLLM's default for
    the target's layer count); every mismatch between config and weights is one clear error."""
    path = Path(path)
    cfg = check_head_dir(path)
    # copies in memory of their own: the module keeps these tensors, and the file's are views at any offset of its
    # buffer (unaligned memory takes other kernels, which round differently)
    sd = {k: v.clone(memory_format=torch.contiguous_format) for k, v in read_tensors(path).items()}
    if target is not None:
        cfg.with_target_taps(target.config.num_hidden_layers)
    with torch.device("meta"):  # shapes and dtypes only: no random init, no memory the checkpoint then replaces
        model = cls(cfg)
    if target is not None:
        model.check_compatible(target)
    expected = model.state_dict()
    _fill_shared(cfg, sd, target, path)
    d2t, t2d = unset_maps(cfg.draft_vocab_size, cfg.vocab_size)
    if "d2t" not in sd and cfg.draft_vocab_size == cfg.vocab_size:
        sd["d2t"], sd["t2d"] = d2t, t2d
    if "d2t" in sd and tuple(sd["d2t"].shape) == tuple(expected["d2t"].shape):
        sd.setdefault("t2d", t2d_from_d2t(sd["d2t"], cfg.vocab_size, fix=_FIX))
    else:
        sd.setdefault("t2d", t2d)
    sd.setdefault("mask_hidden", torch.zeros_like(expected["mask_hidden"], device="cpu"))  # EAGLE-3 has none
    _check_tensors(path, {k: tuple(v.shape) for k, v in sd.items()},
                   {k: tuple(v.shape) for k, v in expected.items()})
    # assign: the module takes these tensors in place of its meta ones
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in sd.items()}, assign=True)
    return model.to(device=device, dtype=dtype).eval() if device else model.to(dtype=dtype).eval()


def _fill_shared(cfg: PEagleConfig, sd: dict, target, path: Path) -> None:
    """Embeddings shared with the target: the target's, with the stored ``mask_embedding`` row when there is one
    (a head without either takes the target's as they are, as vLLM does)."""
    if "embed_tokens.weight" in sd:
        return
    if target is None:
        raise PeagleError(f"{path} shares token embeddings with its target: pass target=... to load it.")
    emb = target.get_input_embeddings().weight.detach().cpu().float().clone()
    if "mask_embedding" in sd:
        emb[cfg.mask_token_id] = sd.pop("mask_embedding").float()
    sd["embed_tokens.weight"] = emb


def _check_tensors(path, shapes: dict, expected: dict, optional=()) -> None:
    """``shapes`` (name -> shape, as stored) against ``expected``; ``optional`` names may be absent."""
    missing = sorted(set(expected) - set(shapes) - set(optional))
    unexpected = sorted(set(shapes) - set(expected))
    wrong = sorted(k for k in set(expected) & set(shapes) if tuple(shapes[k]) != tuple(expected[k]))
    if missing or unexpected or wrong:
        detail = []
        if missing:
            detail.append(f"missing tensors {missing}")
        if unexpected:
            detail.append(f"unexpected tensors {unexpected}")
        if wrong:
            detail.append("misshaped tensors " + ", ".join(
                f"{k}: {tuple(shapes[k])} (expected {tuple(expected[k])})" for k in wrong))
        raise PeagleError(f"Checkpoint {path} does not match its config: " + "; ".join(detail) +
                          ". Fix: the config.json and model.safetensors come from different heads, or the file"
                          " is damaged; re-save the head.")
