"""Which target a file was made with: :func:`target_fingerprint` (this exact copy of the weights) and
:func:`target_identity` (this model, whatever dtype it was loaded in). Features, distilled data and training
record them to refuse mixing targets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

_EMBED = "embed_tokens.weight"  # the input embedding of every Llama-family decoder, however deep its prefix
_ROWS = 8  # the embedding rows the identities read


def _digest(tensors, bf16: bool) -> str:
    """The one rule of both identities: sha256 over the tensors as float32 (rounded to bfloat16 first when
    ``bf16``), 16 hex digits."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach()
        h.update((t.to(torch.bfloat16) if bf16 else t).float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def _model_tensors(model) -> tuple[torch.Tensor, torch.Tensor]:
    return model.get_input_embeddings().weight[:_ROWS], model.model.norm.weight


def target_fingerprint(model) -> str:
    """A cheap identity of the target's weights (first embedding rows + final norm), to refuse mixed resumes."""
    return _digest(_model_tensors(model), bf16=False)


def target_identity(model) -> str:
    """Like :func:`target_fingerprint`, but the same whatever dtype the target was loaded in (the tensors are
    rounded to bfloat16 first): which model, not which copy. Training checks data and heads with it."""
    return _digest(_model_tensors(model), bf16=True)


def checkpoint_identities(model_dir, dtype: torch.dtype) -> tuple[str, str] | None:
    """``(target_fingerprint, target_identity)`` of the target in ``model_dir`` as loaded in ``dtype``, read from
    its safetensors without loading the model: only the first embedding rows and the final norm are read
    (through ``model.safetensors.index.json`` when sharded). ``None`` when the directory holds no safetensors
    or those two tensors cannot be told by name; then the model has to be loaded to fingerprint it."""
    tensors = _checkpoint_tensors(Path(model_dir))
    if tensors is None:
        return None
    loaded = [t.to(dtype) for t in tensors]  # what from_pretrained(dtype=...) holds
    return _digest(loaded, bf16=False), _digest(loaded, bf16=True)


def _weight_map(model_dir: Path) -> dict[str, Path] | None:
    """Tensor name -> the safetensors file that holds it (``None``: no safetensors checkpoint here)."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError):
            return None
        return {name: model_dir / file for name, file in files.items()}
    single = model_dir / "model.safetensors"
    if not single.is_file():
        return None
    with safe_open(str(single), framework="pt") as f:
        return {name: single for name in f.keys()}


def _tensor_names(names) -> tuple[str, str] | None:
    """The input embedding and the final norm among a checkpoint's tensor names: the one ``*embed_tokens.weight``
    and the ``norm.weight`` beside it (``model.`` for Llama, Qwen, Mistral, GPT-OSS; ``model.language_model.``
    and the like for wrapped decoders). ``None`` when there is not exactly one such pair."""
    embeds = [n for n in names if n == _EMBED or n.endswith("." + _EMBED)]
    if len(embeds) != 1:
        return None
    norm = embeds[0][: -len(_EMBED)] + "norm.weight"
    return (embeds[0], norm) if norm in names else None


def _checkpoint_tensors(model_dir: Path) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first embedding rows and the final norm as stored, or ``None`` (see :func:`checkpoint_identities`)."""
    from safetensors import safe_open

    files = _weight_map(model_dir) if model_dir.is_dir() else None
    pair = _tensor_names(set(files)) if files else None
    if pair is None or not all(files[n].is_file() for n in pair):
        return None
    with safe_open(str(files[pair[0]]), framework="pt") as f:
        emb = f.get_slice(pair[0])
        if len(emb.get_shape()) != 2:
            return None
        rows = emb[:_ROWS]
    with safe_open(str(files[pair[1]]), framework="pt") as f:
        norm = f.get_tensor(pair[1])
    return (rows, norm) if norm.dim() == 1 and norm.shape[0] == rows.shape[1] else None


def target_identities(model) -> dict:
    """What a file records of the target it was made with: ``target_fingerprint`` and ``target_identity``."""
    return dict(target_fingerprint=target_fingerprint(model), target_identity=target_identity(model))


def holds_float32(model) -> bool:
    """Whether ``model``'s weights are float32, the copy whose fingerprint every other copy's can be told from."""
    try:
        return next(model.parameters()).dtype == torch.float32
    except (AttributeError, StopIteration, TypeError):
        return False


def recorded_target_problem(record: dict, model) -> str | None:
    """Why ``record`` (a manifest, meta or head config dict with ``target_identity`` and / or
    ``target_fingerprint``) was made with another target than ``model``, or None when it was made with this one
    (or records nothing): :func:`identity_problem` with ``model``'s identities."""
    return identity_problem(record, target_identities(model), holds_float32(model))


def identity_problem(record: dict, mine: dict, float32: bool) -> str | None:
    """The one rule of "made with this target": why ``record`` names another target than the one whose
    :func:`target_identities` are ``mine`` (None: the same target, or nothing recorded).

    ``target_identity`` is compared when recorded (it does not depend on the dtype). A record with only the exact
    ``target_fingerprint`` matches this copy's fingerprint or its bf16 rounding (the fingerprint of a bf16 copy of
    the same weights is their ``target_identity``); any other fingerprint is another target only when this copy is
    float32 (``float32``): a rounded copy cannot tell a float32 copy of the same weights from another model."""
    theirs_id, theirs_fp = record.get("target_identity"), record.get("target_fingerprint")
    if theirs_id:
        mine_id = mine["target_identity"]
        return None if theirs_id == mine_id else f"target fingerprint {theirs_id}, this target {mine_id}"
    if theirs_fp and float32 and theirs_fp not in (mine["target_fingerprint"], mine["target_identity"]):
        return f"target fingerprint {theirs_fp}, this target {mine['target_fingerprint']}"
    return None
