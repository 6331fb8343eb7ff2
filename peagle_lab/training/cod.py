"""COD (conditional drop-token) sampling, as PARD and P-EAGLE train: depth 0 trains every anchor, depth ``d``
only ``max(ratio**d, min_ratio)`` of them, nested in the anchors kept at depth ``d-1``, so training ``K`` depths
costs far less than ``K`` times one depth."""

from __future__ import annotations

import torch

from ..errors import PeagleError


def cod_sizes(num_anchors: int, num_depths: int, ratio: float = 0.7, min_ratio: float = 0.2) -> list[int]:
    """Anchors kept per depth: ``num_anchors`` at depth 0, ``round(num_anchors * max(ratio**d, min_ratio))``
    (at least 1, never more than the depth before) at depth ``d``."""
    sizes = []
    for d in range(num_depths):
        n = num_anchors if d == 0 else max(1, int(round(num_anchors * max(ratio ** d, min_ratio))))
        sizes.append(min(n, sizes[-1]) if sizes else n)
    return sizes if num_anchors > 0 else [0] * num_depths


def cod_sample(num_anchors: int, num_depths: int, ratio: float = 0.7, min_ratio: float = 0.2,
               generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Anchor indices per depth (sorted LongTensors): depth 0 all of ``range(num_anchors)``, depth ``d`` a random
    subset of depth ``d-1``'s of size :func:`cod_sizes` (nested: every rollout kept at depth ``d`` also exists
    at every depth before it)."""
    if num_depths < 1:
        raise PeagleError(f"num_depths must be >= 1, got {num_depths}. Fix: -K 1 or more.")
    if not (0 < ratio <= 1 and 0 <= min_ratio <= 1):
        raise PeagleError(f"COD ratios must lie in (0, 1]: ratio={ratio}, min_ratio={min_ratio}. Fix: --cod-ratio and "
                          "--cod-min-ratio in (0, 1], e.g. 0.7 and 0.2.")
    sizes = cod_sizes(num_anchors, num_depths, ratio, min_ratio)
    out = [torch.arange(num_anchors)]
    for n in sizes[1:]:
        prev = out[-1]
        keep = torch.randperm(prev.numel(), generator=generator)[:n]
        out.append(prev[keep].sort().values)
    return out
