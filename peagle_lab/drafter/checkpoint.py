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
    cfg["torch_dtype"] = str(dtype or torch.float32).replace("torch.", "")
    atomic_write(path / WEIGHTS, lambda f: save_file(tensors, f, metadata={"format": "pt"}))
    write_json(path / CONFIG, cfg)
    return path


def load_pretrained(cls, path, target=None, device=None, dtype=torch.float32):
    """Load a head directory as a ``cls`` (:class:`~.network.PEagleDrafter`). ``target`` (the HF model) is needed
    when embeddings are shared with it; every mismatch between config and weights is one clear error."""
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
        sd.setdefault("t2d", t2d_from_d2t(sd["d2t"], cfg.vocab_size, fix=_FIX))
    else:
        sd.setdefault("t2d", expected["t2d"])
    _check_tensors(path, sd, expected)
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in sd.items()})
    return model.to(device=device, dtype=dtype).eval() if device else model.to(dtype=dtype).eval()


def _check_tensors(path, sd: dict, expected: dict) -> None:
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
