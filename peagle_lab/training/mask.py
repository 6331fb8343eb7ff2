"""The training attention mask: which elements each element may attend to.

Both modes: ``(a, d)`` sees the depth-0 elements of its own sequence with anchor ``<= a`` (the context the
drafter's KV cache holds at inference) and the elements of its own rollout ``(a, d' <= d)`` -- exactly what the
one-pass parallel draft at inference sees. Keys come in the cache order (depth by depth); sequences packed in one
row never see each other.
"""

from __future__ import annotations

import torch

from .elements import Depth, RowPlan


def training_mask(depths: list[Depth], d: int) -> torch.Tensor:
    """Bool (Q_d, N_0 + ... + N_d), True = may attend: depth-0 keys of the same sequence with anchor <= a, and
    keys of the query's own rollout (same anchor) at depths 1..d. Key order = the cache order (depth by depth)."""
    q = depths[d]
    k0 = depths[0]
    m0 = (k0.seq[None, :] == q.seq[:, None]) & (k0.anchor_pos[None, :] <= q.anchor_pos[:, None])
    parts = [m0] + [depths[e].g[None, :] == q.g[:, None] for e in range(1, d + 1)]
    return torch.cat(parts, dim=1)


def full_training_mask(plan: RowPlan) -> tuple[torch.Tensor, list[tuple[int, int, int]]]:
    """Every element against every element (for pictures): bool (N, N) and the ``(seq, anchor, depth)`` of each
    row/column in cache order. Row block ``d`` is :func:`training_mask` padded with False for deeper keys."""
    labels = [(int(s), int(a), d) for d, el in enumerate(plan.depths) for s, a in zip(el.seq, el.anchor_pos)]
    n = len(labels)
    rows = []
    for d in range(len(plan.depths)):
        m = training_mask(plan.depths, d)
        rows.append(torch.cat([m, m.new_zeros(m.shape[0], n - m.shape[1])], dim=1))
    return torch.cat(rows), labels
