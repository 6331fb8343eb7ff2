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


def recorded_target_problem(record: dict, model) -> str | None:
    """Why ``record`` (a manifest or meta dict with ``target_identity`` and / or ``target_fingerprint``) was made
    with another target than ``model``, or None when it was made with this one (or records nothing).

    ``target_identity`` is compared when recorded; a record with only the exact ``target_fingerprint`` matches this
    copy's fingerprint or its bf16 rounding (the fingerprint of a bf16 copy of the same weights is their
    ``target_identity``)."""
    theirs_id, theirs_fp = record.get("target_identity"), record.get("target_fingerprint")
    if theirs_id:
        mine = target_identity(model)
        return None if theirs_id == mine else f"target fingerprint {theirs_id}, this target {mine}"
    if theirs_fp:
        mine_fp, mine_id = target_fingerprint(model), target_identity(model)
        return None if theirs_fp in (mine_fp, mine_id) else f"target fingerprint {theirs_fp}, this target {mine_fp}"
    return None
