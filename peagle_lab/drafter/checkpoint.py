"""The drafter's checkpoint: a directory with ``config.json`` and ``model.safetensors`` under vLLM's eagle3 names
(docs/checkpoint-format.md), written by :func:`save_pretrained` and read back by :func:`load_pretrained`.

Embeddings shared with the target are stored as one ``mask_embedding`` row; ``d2t`` / ``t2d`` (the draft-vocabulary
maps, :mod:`.vocab`) are stored only for a reduced draft vocabulary. :class:`~.network.PEagleDrafter`'s
``export_state_dict`` / ``save_pretrained`` / ``from_pretrained`` call these functions."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..atomic import atomic_write, write_json
from ..errors import PeagleError
from .vocab import t2d_from_d2t
from .config import _FIX, CONFIG, WEIGHTS, PEagleConfig
from ..precision import dtype_name


def export_state_dict(model) -> dict[str, torch.Tensor]:
    """``model``'s weights under vLLM's eagle3 names: the shared embeddings as their ``mask_embedding`` row, no
    ``d2t`` / ``t2d`` for the full vocabulary."""
    cfg = model.config
    out = {}
    for k, v in model.state_dict().items():
        if k == "embed_tokens.weight" and cfg.embed_shared_with_target:
            out["mask_embedding"] = v[cfg.mask_token_id].clone()
            continue
        if k == "t2d" or k == "d2t":
            if cfg.draft_vocab_size == cfg.vocab_size:
                continue
        out[k] = v
    return out


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
    cfg = model.config.to_json_dict()
    cfg["torch_dtype"] = dtype_name(dtype or torch.float32)
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
        rec = json.loads((path / "training.json").read_text()).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return {}, ""
    return {"mode": rec.get("mode"), "num_hidden_layers": rec.get("layers")}, "training.json"


def check_head_dir(path) -> PEagleConfig:
    """A head directory whose weights match its config, checked without loading a tensor (config.json, the
    safetensors header, training.json): the config is valid; the mode and layer count the weights were trained
    with are the config's; every tensor is there with the shape the config gives it. Returns the config."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not (path / CONFIG).is_file() or not (path / WEIGHTS).is_file():
        raise PeagleError(f"{path} is not a drafter checkpoint: it needs {CONFIG} and {WEIGHTS}. "
                          "Fix: point at a directory written by PEagleDrafter.save_pretrained / `peagle-lab train`.")
    cfg = PEagleConfig.from_dir(path)
    try:
        with safe_open(str(path / WEIGHTS), "pt") as fh:
            shapes = {k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()}
            metadata = fh.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise PeagleError(f"{path / WEIGHTS} cannot be read ({exc}): the checkpoint is corrupt or truncated. "
                          "Fix: re-export or retrain the head.") from None
    recorded, source = _recorded_shape(path, metadata)
    for key, flag in (("mode", "peagle.mode"), ("num_hidden_layers", "num_hidden_layers")):
        if recorded.get(key) is not None and recorded[key] != getattr(cfg, key):
            raise PeagleError(f"{path}: config.json says {flag} = {getattr(cfg, key)!r} but its weights were trained "
                              f"with {recorded[key]!r} ({source}): config and weights come from different heads. "
                              f"Fix: put the config.json of those weights back, or point at the right head.")
    from .network import PEagleDrafter

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in export_state_dict(PEagleDrafter(cfg)).items()}
    _check_tensors(path, shapes, expected, optional={"t2d"})
    return cfg


def load_pretrained(cls, path, target=None, device=None, dtype=torch.float32):
    """Load a head directory as a ``cls`` (:class:`~.network.PEagleDrafter`). ``target`` (the HF model) is needed
    when embeddings are shared with it; every mismatch between config and weights is one clear error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    cfg = check_head_dir(path)
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
        sd.setdefault("t2d", t2d_from_d2t(sd["d2t"], cfg.vocab_size, fix=_FIX))
    else:
        sd.setdefault("t2d", expected["t2d"])
    _check_tensors(path, {k: tuple(v.shape) for k, v in sd.items()},
                   {k: tuple(v.shape) for k, v in expected.items()})
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in sd.items()})
    return model.to(device=device, dtype=dtype).eval() if device else model.to(dtype=dtype).eval()


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
