"""Held-out per-depth accuracy of a trained head: on sequences it never trained on, how often its greedy draft at
depth ``d`` equals the target's greedy token, with every anchor at every depth (no COD subsampling), computed by
the training objective's own forward (:class:`~peagle_lab.training.objective.DraftTrainer`), which equals the
one-pass inference draft. A label outside the draft vocabulary counts as a miss, as acceptance counts it."""

from __future__ import annotations

import copy

import torch

from ..drafter import PEagleDrafter
from ..training.elements import plan_row
from ..training.objective import DraftTrainer


@torch.no_grad()
def depth_accuracy(head: PEagleDrafter, sequences: list[dict], num_depths: int | None = None) -> dict:
    """``{"accuracy": [per depth], "elements": [per depth]}`` of ``head`` on ``sequences`` (from
    :func:`~peagle_lab.training.prepare_sequences`), one sequence at a time; ``num_depths`` defaults to the head's
    trained K. The accuracy of depth ``d`` pools every anchor ``a`` with ``a + d + 1`` inside its sequence."""
    cfg = head.config
    depths = num_depths or cfg.num_speculative_tokens
    variant = cfg.extra.get("mask_hidden_variant", "learned")
    src = copy.deepcopy(head).float()  # the caller's head stays as it is (dtype included)
    trainer = DraftTrainer(copy.deepcopy(src), cfg.mode, mask_hidden=variant).eval()
    trainer.load_head(src)
    n, correct = [0] * depths, [0] * depths
    for seq in sequences:
        if len(seq["input_ids"]) < 2:
            continue
        plan = plan_row([seq], depths, ratio=1.0, min_ratio=1.0)  # every anchor at every depth
        _, metrics = trainer(plan)
        for d, m in enumerate(metrics):
            n[d] += m["n"]
            correct[d] += m["correct"]
    return dict(accuracy=[round(c / k, 4) if k else None for c, k in zip(correct, n)], elements=n)
