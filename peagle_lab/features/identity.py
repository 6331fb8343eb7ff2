"""Which target a file was made with: :func:`target_fingerprint` (this exact copy of the weights) and
:func:`target_identity` (this model, whatever dtype it was loaded in). Features, distilled data and training
record them to refuse mixing targets."""

from __future__ import annotations

import hashlib

import torch


def target_fingerprint(model) -> str:
    """A cheap identity of the target's weights (first embedding rows + final norm), to refuse mixed resumes."""
    h = hashlib.sha256()
    for t in (model.get_input_embeddings().weight[:8], model.model.norm.weight):
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def target_identity(model) -> str:
    """Like :func:`target_fingerprint`, but the same whatever dtype the target was loaded in (the tensors are
    rounded to bfloat16 first): which model, not which copy. Training checks data and heads with it."""
    h = hashlib.sha256()
    for t in (model.get_input_embeddings().weight[:8], model.model.norm.weight):
        h.update(t.detach().to(torch.bfloat16).float().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


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
