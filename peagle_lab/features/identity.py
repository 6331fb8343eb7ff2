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
