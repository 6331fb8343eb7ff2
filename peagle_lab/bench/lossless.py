"""What "lossless" means at a dtype: fp32 outputs equal plain greedy token for token; bf16 outputs may diverge
only where the plain run's top-2 logits are a near-tie. And the lossless column in words."""

from __future__ import annotations

import torch


def lossless_regime(dtype) -> str:
    """``exact`` (fp32: token for token) or ``near-tie`` (bf16: divergences only where the plain run's top-2
    logits are within bf16 resolution, see ``divergence.tie_bound``)."""
    return "exact" if dtype in (torch.float32, torch.float64) else "near-tie"


def lossless_note(regime: str, n_runs: int, divs: list[dict]) -> str:
    """The lossless column in words: which regime, how many outputs diverged, the largest margin among them."""
    if regime == "exact":
        bad = len(divs)
        return "exact: identical to plain greedy" if not bad else f"exact: {bad}/{n_runs} outputs DIFFER"
    if not divs:
        return f"bf16: {n_runs}/{n_runs} identical to plain bf16 greedy"
    ties = sum(d["near_tie"] for d in divs)
    worst = max(d["margin"] for d in divs)
    return (f"bf16: {len(divs)}/{n_runs} diverge, {ties} at near-ties; largest margin {worst:.3g}"
            + ("" if ties == len(divs) else " (NOT a near-tie)"))
